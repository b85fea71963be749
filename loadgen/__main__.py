import sys

from loadgen.cli.main import main

sys.exit(main())
