"""``python -m loadgen``: the CLI, with the working directory kept from shadowing the project's packages.

``python -m`` puts the working directory first on ``sys.path``, so a user's own ``scenarios/`` or
``reports/`` folder (natural names for run material) would be imported in place of the project's
top-level packages of those names. Outside a source checkout (no ``loadgen/`` there) it is dropped.
"""

import os
import sys

if sys.path and os.path.abspath(sys.path[0] or ".") == os.getcwd() and not os.path.isdir("loadgen"):
    del sys.path[0]

from loadgen.cli.main import main  # after the path fix above

sys.exit(main())
