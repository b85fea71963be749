"""Read canary files into columns, a big run in several processes at once: byte ranges of whole lines.

Why: parsing a line is the floor once columns are built without per-token Python
(``collectors.read.fastcolumns``), and one process parses about ten thousand 128-token records a second;
a million-record study needs the machine's other cores. Each file is cut into byte ranges that start
and end at line boundaries; each range is read by its own process (a forkserver child, safe beside
the threads a CLI process runs; never from a process where gevent is loaded, which reads alone) and
comes back as columns, which are joined in file and range order
with token strings re-coded into one vocabulary in first-seen order, so the result equals one
sequential read: same rows, same codes, same skipped line numbers. A run smaller than
``PARALLEL_MIN_BYTES`` per worker, or a record that raises, is read in this process (the error then
names the same record as a sequential read would). Must not print; no analysis here.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
from multiprocessing import get_context
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd  # type: ignore[import-untyped]

from collectors.jsonl import LINE_LIMIT, bounded_lines
from collectors.read.columns import CanaryColumns, ColumnBuilder, FileRead, file_read
from collectors.read.fastcolumns import READ_BUFFER, FastColumnBuilder
from collectors.read.matrices import _GONE, _widen, mapped_copy
from collectors.read.sidecar import ColumnsFileBuilder, has_columns, read_file
from loadgen.core.errors import RunFolderError
from loadgen.core.runfiles import open_lines

PARALLEL_MIN_BYTES = 64 << 20  # below this much canary JSONL per worker, one process reads it all
# at most this much JSONL per range: a worker holds one range's columns at a time (about 10,000 records of 128
# tokens), so the workers' memory stays small beside the joined columns however big the run
RANGE_BYTES = 128 << 20


@dataclass
class RangeRead:
    """One byte range of one file, read: its columns, its lines, and the lines it skipped (1-based in the range)."""

    columns: CanaryColumns
    lines: int
    skipped: list[int]
    malformed: dict[int, str]  # of ``skipped``, the records no column can hold, and why (1-based in the range)
    failed: bool  # a record raised RunFolderError: the caller reads the file sequentially to report it


def read_canaries(
    paths: list[Path], *, workers: int | None = None, reference: bool = False, line_limit: int = LINE_LIMIT
) -> tuple[CanaryColumns, list[FileRead]]:
    """Every canary file's records as one set of columns, and what was read from each file.

    ``workers``: processes to use (default: the usable cores, one per ``PARALLEL_MIN_BYTES``);
    ``reference``: the reference builder in this process (for benchmarks and agreement tests); ``line_limit``: the
    longest line a file may hold (``collectors.jsonl.record_line_limit``)."""
    if reference:
        builder: ColumnBuilder = ColumnBuilder(line_limit)
        files = [builder.add_file(p) for p in paths]
        return builder.finish(), files
    if any(has_columns(p) for p in paths):  # mapped columns: one process reads them faster than workers start
        return _sequential(paths, line_limit)
    sizes = [_size(p) for p in paths]
    if workers is None:
        workers = min(_cores(), sum(sizes) // PARALLEL_MIN_BYTES)
    if workers <= 1 or "gevent" in sys.modules:  # a forked child of a gevent-patched process is not safe
        return _sequential(paths, line_limit)
    tasks = [
        (p, a, b, line_limit)
        for p, size in zip(paths, sizes, strict=True)
        for a, b in line_ranges(p, size, max(workers * 2, -(-size // RANGE_BYTES)), line_limit)
    ]
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("forkserver")) as pool:
        reads = [_apart(r) for r in pool.map(read_range, *zip(*tasks, strict=True))]
    if any(r.failed for r in reads):  # the sequential read raises its own error, naming the same record
        return _sequential(paths, line_limit)
    files = []
    for path in paths:
        mine = [r for (p, _, _, _), r in zip(tasks, reads, strict=True) if p == path]
        skipped: list[int] = []
        malformed: dict[int, str] = {}
        before = 0
        for r in mine:
            skipped += [before + n for n in r.skipped]
            malformed.update((before + n, why) for n, why in r.malformed.items())
            before += r.lines
        records = sum(r.columns.n for r in mine)
        files.append(file_read(path, records, skipped, malformed))
    return merge_columns([r.columns for r in reads]), files


def _apart(read: RangeRead) -> RangeRead:
    """``read`` with its matrices moved out of the allocator's heap as it arrives (``matrices.mapped_copy``)."""
    c = read.columns
    c.token_ids, c.token_codes = mapped_copy(c.token_ids), mapped_copy(c.token_codes)
    c.logprobs, c.top_gap = mapped_copy(c.logprobs), mapped_copy(c.top_gap)
    return read


def _sequential(paths: list[Path], line_limit: int) -> tuple[CanaryColumns, list[FileRead]]:
    with gc_paused():
        fast = ColumnsFileBuilder(line_limit)
        files = [read_file(fast, p, line_limit) for p in paths]
        return fast.finish(), files


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while records are poured into columns: the parsed records hold no
    cycles, and each collection would walk every container still pending in the chunk (2x the read time)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_range(path: Path, start: int, end: int, line_limit: int = LINE_LIMIT) -> RangeRead:
    """The records of the lines starting in ``[start, end)`` of ``path`` (``start`` is a line start)."""
    with gc_paused():
        return _read_range(path, start, end, line_limit)


def _read_range(path: Path, start: int, end: int, line_limit: int) -> RangeRead:
    builder = FastColumnBuilder(line_limit)
    try:
        with open_lines(path, buffering=READ_BUFFER) as fh:
            fh.seek(start)
            _, lines, skipped, malformed = builder.add_lines(_lines_before(fh, end, path, line_limit), path)
    except OSError as exc:
        raise RunFolderError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except RunFolderError:  # the caller reads the file sequentially to report it
        return RangeRead(FastColumnBuilder().finish(), 0, [], {}, failed=True)
    return RangeRead(builder.finish(), lines, skipped, malformed, failed=False)


def _lines_before(fh: BinaryIO, end: int, path: Path, limit: int) -> Iterator[bytes]:
    """The lines of ``fh`` from where it stands that start before byte ``end`` (none longer than ``limit``)."""
    pos = fh.tell()
    for line in bounded_lines(fh, path, limit):
        if pos >= end:
            return
        pos += len(line)
        yield line


def line_ranges(path: Path, size: int, parts: int, limit: int = LINE_LIMIT) -> list[tuple[int, int]]:
    """About ``parts`` byte ranges covering the file, each starting at a line start (a line longer than ``limit``
    bytes is refused, as ``collectors.jsonl.bounded_lines`` refuses it)."""
    if size == 0:
        return [(0, 0)]
    cuts = [0]
    with open_lines(path) as fh:
        for k in range(1, parts):
            fh.seek(max(size * k // parts, cuts[-1]))
            if fh.tell() > 0:
                fh.seek(fh.tell() - 1)  # a cut exactly after a newline stays there
                at = fh.tell()
                if len(fh.readline(limit + 1)) > limit:
                    raise RunFolderError(
                        f"{path}: more than {limit:,} bytes without a line break after byte {at:,}, longer than any "
                        "record of this file can be; refused"
                    )
            at = fh.tell()
            if cuts[-1] < at < size:
                cuts.append(at)
    cuts.append(size)
    return list(pairwise(cuts))


def merge_columns(parts: list[CanaryColumns]) -> CanaryColumns:
    """Columns read in parts, joined in order, token codes re-coded into one first-seen vocabulary.

    Consumes the parts: each part's matrix is let go once it is copied, so joining a big run needs the
    parts plus one joined matrix at a time, not twice the whole."""
    parts = [p for p in parts if p.n] or parts[:1]
    vocab: dict[str, int] = {}
    for p in parts:  # re-coded in place: the parts are consumed
        remap = np.array([vocab.setdefault(str(t), len(vocab)) for t in p.vocab.tolist()], dtype=np.int32)
        codes = p.token_codes
        if remap.size:
            coded = codes >= 0
            codes[coded] = remap[codes[coded]]
    words = np.empty(len(vocab), dtype=object)
    words[:] = list(vocab)
    frame = pd.concat([p.frame for p in parts], ignore_index=True) if len(parts) > 1 else parts[0].frame
    for p in parts:  # the parts' frames are copied: let them go before the matrices are joined
        p.frame = None
    return CanaryColumns(
        frame=frame,
        token_ids=_join(parts, "token_ids", -1),
        token_codes=_join(parts, "token_codes", -1),
        vocab=words,
        logprobs=_join(parts, "logprobs", np.nan),
        top_gap=_join(parts, "top_gap", np.nan),
    )


def _join(parts: list[CanaryColumns], name: str, fill: float) -> Any:
    """The parts' ``name`` matrices stacked by ``matrices._widen``, which lets each go as it is copied
    (the parts let go of theirs first)."""
    mats = [getattr(p, name) for p in parts]
    for p in parts:
        setattr(p, name, _GONE)
    return _widen(mats, fill)


def _size(path: Path) -> int:
    try:
        with open_lines(path, buffering=0) as fh:
            return os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise RunFolderError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
