"""Prove a big columns file's rows (``collectors.read.sideproof``) in several processes at once.

Why: proving a row writes its JSONL line again, and most of that is one Python step per alternative of every
position (about 40 µs a 128-token record with two alternatives a position, on one core: docs/performance.md), so
a million-record file takes a minute on one core. The rows are independent: this reads the index a piece at a time
in this process (where ``sideproof`` checks each row against what its line can hold), cuts the piece into ranges of
``RANGE_ROWS`` rows, has forkserver children prove them, each where the range starts in every file, and takes
their answers in order: the first range not proven whole ends the coverage there, as one process proving alone
would (``tests/collectors/test_proofpool_e2e.py``). A child keeps its open files and the vocabulary it has read
between ranges. A small file, one core, or a process where gevent is loaded (a forked child of it is not safe)
proves in this process. Must not print.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from multiprocessing import get_context
from pathlib import Path
from typing import BinaryIO

import numpy as np

from collectors.read.sideproof import Mapped, Prover, prove
from collectors.sidecar import FILES, INDEX
from loadgen.core.runfiles import open_lines, open_regular

PROVE_MIN_BYTES = 256 << 20  # of JSONL per process: below it, the children's start costs more than they save
RANGE_ROWS = 4096  # rows a child proves at a time


def prove_file(
    files: dict[str, BinaryIO], folder: Path, jsonl: BinaryIO, jsonl_path: Path, line_limit: int
) -> tuple[Mapped | None, str | None]:
    """``sideproof.prove``, in several processes where the JSONL is big enough to gain from them."""
    workers = min(_cores(), os.fstat(jsonl.fileno()).st_size // PROVE_MIN_BYTES)
    if workers <= 1 or _gevent_loaded():
        return prove(files, jsonl.fileno(), line_limit)
    parent = Prover(files, jsonl.fileno(), line_limit)
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("forkserver")) as pool:
        for piece in parent.pieces():
            ranges = [piece[a : a + RANGE_ROWS] for a in range(0, len(piece), RANGE_ROWS)]
            starts = [parent.position(piece[:a]) for a in range(0, len(piece), RANGE_ROWS)]
            tasks = [
                (str(folder), str(jsonl_path), line_limit, rows.tobytes(), *start)
                for rows, start in zip(ranges, starts, strict=True)
            ]
            for rows, (proven, why) in zip(ranges, pool.map(prove_range, *zip(*tasks, strict=True)), strict=True):
                parent.keep(rows[:proven])
                if proven < len(rows):
                    return parent.result(why)
    return parent.result(parent.why)


_OPEN: dict[tuple[str, str], tuple[ExitStack, Prover]] = {}  # in a child: each file's prover, kept between ranges


def prove_range(
    folder: str, jsonl: str, line_limit: int, index: bytes, rows: int, end: int, at: dict[str, int]
) -> tuple[int, str | None]:
    """In a child: how many of the index rows ``index`` (the file's rows from number ``rows``, whose line starts at
    byte ``end`` of the JSONL and whose values at ``at`` in each file) are proven lines, and why the next is not."""
    key = (folder, jsonl)
    if key not in _OPEN:
        stack = ExitStack()
        files = {name: stack.enter_context(open_regular(Path(folder) / name, buffering=0)) for name in FILES}
        fd = stack.enter_context(open_lines(Path(jsonl), buffering=0)).fileno()
        _OPEN[key] = stack, Prover(files, fd, line_limit)
    prover = _OPEN[key][1]
    prover.start_at(rows, end, at)
    return prover.prove_rows(np.frombuffer(index, dtype=INDEX))


def _gevent_loaded() -> bool:
    return "gevent" in sys.modules  # a forked child of a gevent-patched process is not safe


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
