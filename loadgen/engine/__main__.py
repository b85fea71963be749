"""``python -m loadgen.engine``: run the embedded engine server (see :mod:`loadgen.engine.cli`).

BLAS is pinned to one thread before numpy loads: the engine's matrices are tiny, and OpenBLAS
threads only contend with the HTTP loop on a small machine.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from loadgen.engine.cli import main

raise SystemExit(main())
