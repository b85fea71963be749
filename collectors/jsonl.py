"""Append-only JSON-lines files: a writer that flushes per record (or per interval), a reader that survives a torn tail.

Why: a killed process must lose nothing it finished writing, and a reader must not fail on the
half line such a process leaves behind. The writer counts its own failures, because Locust's
``EventHook.fire`` logs and swallows listener exceptions. Canary records are written one system
call each; background rows, thousands a second, may be gathered for ``flush_s`` seconds and written
together (a killed process loses what it gathered since the last hand-over).

A write can also stop halfway: a full disk or a file-size limit (``RLIMIT_FSIZE``) lets the OS take
part of a line and refuse the rest. The writer keeps writing what is left until the OS refuses, counts
every line not wholly written as a failure (``torn`` counts those cut mid-line), and starts its next
write on a new line, so one torn line never swallows the next record.

Both open through ``loadgen.core.runfiles``: the reader takes only a regular file (no link, FIFO or device
that a crafted run folder holds, none above ``RECORDS_LIMIT``, none with a hole), the writer never appends through a
link. Every reader of a run folder's JSON-lines files reads them through ``bounded_lines``: a line longer than any
record of its file can be is refused (``RunFolderError`` naming the file and line) before more of it is held.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from loadgen.core.errors import RunFolderError
from loadgen.core.runfiles import open_append, open_lines

_LINE = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE
# the longest line a run folder's JSON-lines file may hold where its run says nothing longer (background rows,
# /metrics samples, CPU samples, step traces: kilobytes), and a canary or re-score record's at the default
# endpoint.max_response_bytes (``record_line_limit``)
LINE_LIMIT = 144 << 20
_REQUEST_ROOM = 16 << 20  # a record's request, head and error message besides what its response gave


def record_line_limit(max_response_bytes: int) -> int:
    """The longest line a canary or re-score record can take in a run whose responses were cut at
    ``max_response_bytes`` (``endpoint.max_response_bytes``): twice that (a record writes each alternative as a
    pair, ``["tok",-0.1]``, where a server may send ``"tok":-0.1``), and room for its request."""
    return 2 * max_response_bytes + _REQUEST_ROOM


def bounded_lines(fh: BinaryIO, path: Path, limit: int, *, first: int = 1) -> Iterator[bytes]:
    """The lines of ``fh`` (of ``path``, numbered from ``first``), each with its line break; a ``RunFolderError``
    for the first that is longer than ``limit`` bytes, before more than that of it is read."""
    n = first
    while line := fh.readline(limit + 1):
        if len(line) > limit:
            raise RunFolderError(
                f"{path} line {n}: more than {limit:,} bytes without a line break, longer than any record of this "
                "file can be; refused"
            )
        yield line
        n += 1


class JsonlWriter:
    """Appends one JSON object per line and hands it to the OS before returning; with ``flush_s``, lines
    are gathered and handed over by the first write ``flush_s`` or more after the last hand-over.

    ``written`` counts lines handed to the OS, ``failures`` objects that could not be serialised or
    written (``torn``: of those, lines the OS took only part of); ``flush`` and ``close`` hand over
    what is pending."""

    def __init__(self, path: Path, *, flush_s: float = 0.0) -> None:
        self.path = path
        self.flush_s = flush_s
        self._fh = open_append(path)  # never through a link; lives as long as the writer
        self._pending = bytearray()  # one growing buffer, not an object per line: those fragment the heap
        self._pending_lines = 0
        self._due = 0.0
        self.written = 0
        self.failures = 0
        self.torn = 0
        self._tail_open = False  # the file ends mid-line (a torn write): the next write starts a new line

    def write(self, obj: Any) -> bool:
        line = self.encode(obj)
        return line is not None and self.write_line(line)

    def encode(self, obj: Any) -> bytes | None:
        """``obj`` as its line (newline included), or None (counted as a failure) where it cannot be serialised."""
        try:
            return orjson.dumps(obj, option=_LINE)
        except TypeError:
            self.failures += 1
            return None

    def write_line(self, line: bytes) -> bool:
        """One line from ``encode``, written (or gathered) as ``write`` does; False where it was not written whole."""
        if self._fh.closed:  # gathered now, it would never be handed over
            self.failures += 1
            return False
        if not self.flush_s:
            return self._put(line, 1)
        self._pending += line
        self._pending_lines += 1
        now = time.monotonic()
        if now >= self._due:
            self._due = now + self.flush_s
            self.flush()
        return True

    def flush(self) -> None:
        if self._pending_lines:
            self._put(self._pending, self._pending_lines)
            self._pending.clear()
            self._pending_lines = 0

    def _put(self, data: bytes | bytearray, lines: int) -> bool:
        prefix = 1 if self._tail_open else 0
        with memoryview(b"\n" + bytes(data) if prefix else data) as view:  # released before the caller clears data
            done = 0
            try:
                while done < len(view):
                    n = self._fh.write(view[done:])
                    if not n:  # nothing taken and no error: refused all the same, never spin
                        raise OSError("write took no bytes")
                    done += n
            except (OSError, ValueError):  # ValueError: written after close
                taken = bytes(view[:done])
                whole = taken[prefix:].count(b"\n")
                self.written += whole
                self.failures += lines - whole
                if done:  # part of it reached the file, which now ends mid-line unless a newline came last
                    self._tail_open = not taken.endswith(b"\n")
                    self.torn += int(self._tail_open)
                return False
        self._tail_open = False
        self.written += lines
        return True

    def close(self) -> None:
        if not self._fh.closed:
            self.flush()
            self._fh.close()


@dataclass
class JsonlRead:
    rows: list[dict[str, Any]]
    skipped: int  # lines that were not a complete JSON object (a torn tail, or corruption)
    skipped_lines: list[int]  # 1-based line numbers skipped


def iter_objects(path: Path, skipped: list[int], *, limit: int = LINE_LIMIT) -> Iterator[dict[str, Any]]:
    """Each complete JSON object line of a JSONL file (none longer than ``limit``: ``bounded_lines``); appends the
    numbers of unreadable lines to ``skipped``."""
    for _, obj in iter_numbered(path, skipped, limit=limit):
        yield obj


def iter_numbered(path: Path, skipped: list[int], *, limit: int = LINE_LIMIT) -> Iterator[tuple[int, dict[str, Any]]]:
    """``iter_objects`` with each object's 1-based line number."""
    try:
        with open_lines(path) as fh:
            for n, line in enumerate(bounded_lines(fh, path, limit), start=1):
                if not line.strip():
                    continue
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError:
                    skipped.append(n)
                    continue
                if isinstance(obj, dict):
                    yield n, obj
                else:
                    skipped.append(n)
    except OSError as exc:
        raise RunFolderError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def read_jsonl(path: Path) -> JsonlRead:
    """Read every complete JSON object line; count (not raise on) lines that do not parse."""
    skipped: list[int] = []
    rows = list(iter_objects(path, skipped))
    return JsonlRead(rows=rows, skipped=len(skipped), skipped_lines=skipped)
