"""The canary columns sidecar: each ``canaries*.jsonl`` file's columns, also kept as Arrow IPC record batches.

Why: parsing 13 KB of JSON per record caps a 2-core machine at a few thousand records a second, so a
million-record report took minutes (docs/performance.md). The process that writes a canary line also
keeps the columns the report reads (``collectors.columns.CanaryColumns``: ids, token codes, logprobs,
top-2 gaps, timings and every other frame column) for a batch of lines, built from those very line
bytes by the reader's own builder (``collectors.fastcolumns``), and appends them to
``<file>.columns.arrow`` as one Arrow IPC stream message per batch (every ``BATCH_RECORDS`` records,
``BATCH_S`` seconds, and at close). The reader then copies arrays instead of parsing JSON.

The JSONL file stays the truth; the sidecar is a derived cache that is trusted only where it provably
matches. Each batch names the byte range of the JSONL lines it was built from, its row count and a hash
of its first and last line; a batch is used only when those lines are still there, whole, with those
hashes, and the batches cover disjoint, increasing ranges. Whatever the sidecar does not cover (a batch
not yet flushed when the process was killed, a torn message, a stale or missing sidecar, a batch the
writer dropped because one of its records is one no column can hold) is read from the JSONL by the
ordinary reader, so the columns equal a JSONL-only read: same rows, values, codes and skipped lines.
A folder without sidecars reads as before.

Files are opened through ``loadgen.core.runfiles`` (no link followed, size bounds). pandas and pyarrow
are imported when the first batch is written, never at import, so importing the Locust side stays
light (``tests/loadgen/load/test_locust_imports.py``). Must not print.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from loadgen.core.runfiles import open_append, open_regular

BATCH_RECORDS = 1024  # records per batch (building one costs about 0.2 ms a record plus 30 ms, in the writer)
BATCH_S = 5.0  # a batch started this long ago is written with the next record
SUFFIX = ".columns.arrow"
FORMAT = 1  # the sidecar's own layout; a sidecar of another is ignored (read from the JSONL)
MATRICES = ("token_ids", "token_codes", "logprobs", "top_gap")
# frame columns of Python values (``ColumnBuilder.finish`` keeps them as objects): the exact types kept in the
# sidecar; a batch holding any other type is not written (its rows are read from the JSONL)
_OBJECT_TYPES: dict[str, tuple[frozenset[type], str]] = {
    "http_status": (frozenset((int, type(None))), "int64"),
    "cache_reset_ok": (frozenset((bool, type(None))), "bool_"),
}
_STRING = (frozenset((str, type(None))), "string")


def sidecar_path(jsonl: Path) -> Path:
    """``canaries-w1.jsonl`` -> ``canaries-w1.columns.arrow`` (not matched by ``canaries*.jsonl``)."""
    return jsonl.with_name(jsonl.name.removesuffix(".jsonl") + SUFFIX)


def line_hash(line: bytes) -> str:
    return hashlib.blake2b(line, digest_size=8).hexdigest()


class SidecarWriter:
    """Gathers the lines a ``JsonlWriter`` wrote (``add``) and appends their columns, batch by batch.

    Never raises from ``add``/``close``: a batch that cannot be built or written is left out (``dropped``),
    and a failed write stops the sidecar (its torn tail is detected by the reader); the JSONL holds it all."""

    def __init__(self, jsonl: Path, *, batch_records: int = BATCH_RECORDS, batch_s: float = BATCH_S) -> None:
        self.jsonl = jsonl
        self.path = sidecar_path(jsonl)
        self.batch_records = batch_records
        self.batch_s = batch_s
        self._lines: list[bytes] = []
        self._start = 0
        self._end = 0
        self._due = 0.0
        self._stream: Any = None
        self._sink: _Sink | None = None
        self._fh: Any = None
        self.batches = 0
        self.dropped = 0
        self.stopped = False

    def add(self, line: bytes | None, end: int) -> None:
        """The line just written whole to the JSONL, ending at byte ``end``; None: a write failed there (the
        batch so far is written, the next starts after it)."""
        if self.stopped:
            return
        if line is None:
            self.flush()
            return
        start = end - len(line)
        if self._lines and start != self._end:
            self.flush()
        if not self._lines:
            self._start = start
            self._due = time.monotonic() + self.batch_s
        self._lines.append(line)
        self._end = end
        if len(self._lines) >= self.batch_records or time.monotonic() >= self._due:
            self.flush()

    def flush(self) -> None:
        lines, self._lines = self._lines, []
        if not lines or self.stopped:
            return
        try:
            batch, meta = build_batch(self.jsonl, lines, self._start, self._end)
        except Exception:  # noqa: BLE001 - a batch no column can hold is read from the JSONL instead
            self.dropped += 1
            return
        self.write_built(batch, meta)

    def write_built(self, batch: Any, meta: dict[str, Any]) -> None:
        """Append a batch ``build_batch`` made (None: one it could not make, left out)."""
        if batch is None:
            self.dropped += 1
            return
        try:
            self._write(batch, meta)
        except Exception:  # noqa: BLE001 - a full disk: the reader reads what is missing from the JSONL
            self.stopped = True
            self._close_file()
            return
        self.batches += 1

    def _write(self, batch: Any, meta: dict[str, Any]) -> None:
        import pyarrow as pa

        if self._stream is None:
            self._fh = open_append(self.path)
            if self._fh.seek(0, 2):  # a sidecar already there (not this writer's): leave it, write none
                raise OSError("sidecar exists")
            self._sink = _Sink()
            self._stream = pa.ipc.new_stream(self._sink, batch.schema)
        assert self._sink is not None
        self._stream.write_batch(batch, custom_metadata={"loadgen": orjson.dumps(meta)})
        data, self._sink.data = bytes(self._sink.data), bytearray()
        with memoryview(data) as view:  # whole messages, or a tail the reader detects as torn
            done = 0
            while done < len(view):
                n = self._fh.write(view[done:])
                if not n:
                    raise OSError("write took no bytes")
                done += n

    def _close_file(self) -> None:
        if self._fh is not None and not self._fh.closed:
            self._fh.close()

    def close(self) -> None:
        self.flush()
        self.stopped = True
        self._close_file()


class _Sink:
    """Where pyarrow's stream writer puts a message, so that it reaches the file in one ``write``."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False

    def write(self, b: Any) -> int:
        self.data += b
        return len(b)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def build_batch(jsonl: Path, lines: list[bytes], start: int, end: int) -> tuple[Any, dict[str, Any]]:
    """The columns of ``lines`` (the JSONL's bytes ``[start, end)``) as one Arrow record batch and its metadata,
    built by the reader's own builder; ``(None, {})`` when any line is not a record every column can hold."""
    import pyarrow as pa

    from collectors.fastcolumns import FastColumnBuilder

    builder = FastColumnBuilder()
    count, _, skipped, _ = builder.add_lines(lines, jsonl)
    if skipped or count != len(lines):
        return None, {}
    cols = builder.finish()
    frame = cols.frame
    arrays: list[Any] = []
    names: list[str] = []
    for name in frame.columns:
        if name == "file":
            continue
        values = frame[name]
        kind = str(values.dtype)
        if kind == "object":
            allowed, arrow_type = _OBJECT_TYPES.get(name, _STRING)
            items = values.tolist()
            if not set(map(type, items)) <= allowed:
                return None, {}
            arr = pa.array(items, type=getattr(pa, arrow_type)())
            if name == "text":
                arr = arr.dictionary_encode()
        elif kind == "boolean":
            arr = pa.array([None if v is pd_na() else bool(v) for v in values.tolist()], type=pa.bool_())
        else:
            arr = pa.array(values.to_numpy())
        arrays.append(arr)
        names.append(name)
    widths = {}
    for name in MATRICES:  # padded rows as they are (the padding is the reader's own: -1 or NaN)
        mat = getattr(cols, name)
        arrays.append(_rows_array(mat))
        names.append(name)
        widths[name] = int(mat.shape[1])
    meta = {
        "format": FORMAT,
        "start": start,
        "end": end,
        "rows": len(lines),
        "first": line_hash(lines[0]),
        "last": line_hash(lines[-1]),
        "widths": widths,
        "ids_dtype": str(cols.token_ids.dtype),
        "vocab": cols.vocab.tolist(),
        "columns": [str(c) for c in frame.columns],
    }
    return pa.record_batch(arrays, names=names), meta


def pd_na() -> Any:
    import pandas as pd  # type: ignore[import-untyped]

    return pd.NA


def _rows_array(mat: Any) -> Any:
    """A padded matrix's rows as an Arrow list array, each row its whole width."""
    import pyarrow as pa

    rows, width = mat.shape
    offsets = np.arange(rows + 1, dtype=np.int64) * width
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(np.ascontiguousarray(mat).reshape(-1)))


@dataclass
class SidecarPart:
    """Verified batches covering JSONL bytes ``[start, end)`` contiguously: ``rows`` records, one a line."""

    start: int
    end: int
    rows: int
    batches: list[tuple[Any, dict[str, Any]]] = field(default_factory=list)  # (record batch, metadata)


def read_sidecar(jsonl: Path, size: int) -> list[SidecarPart]:
    """The sidecar's batches that match ``jsonl`` (of ``size`` bytes), as runs of contiguous batches in file
    order; empty when there is no sidecar or none of it matches. Reading stops at a torn or unreadable
    message: what follows is read from the JSONL."""
    path = sidecar_path(jsonl)
    try:
        fh = open_regular(path, buffering=1 << 20)
    except FileNotFoundError:
        return []
    except Exception:  # noqa: BLE001 - a link or special file in its place: read the JSONL instead
        return []
    import pyarrow as pa

    parts: list[SidecarPart] = []
    with fh, open_regular(jsonl) as src:
        try:
            reader = pa.ipc.open_stream(fh)
        except Exception:  # noqa: BLE001 - empty or not a stream
            return []
        last_end = 0
        while True:
            try:
                batch, custom = reader.read_next_batch_with_custom_metadata()
            except StopIteration:
                break
            except Exception:  # noqa: BLE001 - a torn or corrupt message: the rest from the JSONL
                break
            meta = _meta(custom)
            if meta is None or not _matches(src, meta, batch, size, last_end):
                continue
            last_end = int(meta["end"])
            if parts and parts[-1].end == meta["start"]:
                part = parts[-1]
            else:
                part = SidecarPart(int(meta["start"]), int(meta["start"]), 0)
                parts.append(part)
            part.end = last_end
            part.rows += int(meta["rows"])
            part.batches.append((batch.select([n for n in batch.schema.names if n not in MATRICES]), meta))
    return parts


def iter_matrices(jsonl: Path, wanted: set[tuple[int, str]]) -> Any:
    """Each batch of ``wanted`` (start byte and first-line hash, as ``read_sidecar`` kept them), in stream order,
    as its metadata and its four padded matrices (numpy, one row per record); read again from the sidecar so
    that no more than one batch's matrices are held beside the joined ones."""
    import pyarrow as pa

    with open_regular(sidecar_path(jsonl), buffering=1 << 20) as fh:
        reader = pa.ipc.open_stream(fh)
        while wanted:
            try:
                batch, custom = reader.read_next_batch_with_custom_metadata()
            except StopIteration:
                return
            meta = _meta(custom)
            if meta is None or (key := (int(meta["start"]), str(meta["first"]))) not in wanted:
                continue
            wanted.discard(key)
            rows = batch.num_rows
            mats = {}
            for name in MATRICES:
                values = batch.column(name).values.to_numpy(zero_copy_only=False)
                mats[name] = values.reshape(rows, int(meta["widths"][name]))
            yield meta, mats


def _meta(custom: Any) -> dict[str, Any] | None:
    try:
        raw = custom[b"loadgen"] if custom is not None else None
        meta = orjson.loads(raw) if raw is not None else None
    except (KeyError, orjson.JSONDecodeError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return None
    return meta


def _matches(src: Any, meta: dict[str, Any], batch: Any, size: int, last_end: int) -> bool:
    """The batch's lines are in the JSONL as it is now: range within the file and after the last batch, row
    count, and the first and last line whole (a newline before and at the end) with the recorded hashes."""
    try:
        start, end, rows = int(meta["start"]), int(meta["end"]), int(meta["rows"])
        first, last = str(meta["first"]), str(meta["last"])
    except (KeyError, TypeError, ValueError):
        return False
    if not (last_end <= start < end <= size) or rows != batch.num_rows or rows < 1:
        return False
    if start > 0:
        src.seek(start - 1)
        if src.read(1) != b"\n":
            return False
    else:
        src.seek(0)
    head = src.readline()
    if line_hash(head) != first or start + len(head) > end:
        return False
    if rows == 1:
        return start + len(head) == end and first == last
    src.seek(max(start, end - (1 << 20)))
    tail = src.read(end - src.tell())
    if not tail.endswith(b"\n"):
        return False
    cut = tail.rfind(b"\n", 0, len(tail) - 1)
    return cut >= 0 and line_hash(tail[cut + 1 :]) == last


def frame_of(part: SidecarPart, file: str) -> Any:
    """The frame rows of a run of batches, as ``ColumnBuilder.finish`` makes them (``file``: the JSONL's name)."""
    import pandas as pd
    import pyarrow as pa

    batches = [b for b, _ in part.batches]
    order = part.batches[0][1]["columns"]
    table = pa.Table.from_batches(batches)
    texts: dict[str, str] = {}
    data: dict[str, Any] = {}
    for name in order:
        if name == "file":
            data[name] = pd.Series([file] * part.rows, dtype=object)
            continue
        col = table.column(name)
        kind = col.type
        if pa.types.is_dictionary(kind):  # the texts: one string per distinct text, as the JSONL reader interns
            pieces = []
            for chunk in col.chunks:
                words = np.empty(len(chunk.dictionary), dtype=object)
                words[:] = [texts.setdefault(t, t) for t in chunk.dictionary.to_pylist()]
                idx = chunk.indices.to_numpy(zero_copy_only=False)
                got = np.empty(len(chunk), dtype=object)
                valid = ~np.asarray(chunk.is_null())
                got[valid] = words[idx[valid].astype(np.int64)]
                got[~valid] = None
                pieces.append(got)
            data[name] = pd.Series(np.concatenate(pieces) if pieces else [], dtype=object)
        elif name in _OBJECT_TYPES or pa.types.is_string(kind):
            data[name] = pd.Series(col.to_pylist(), dtype=object)
        elif name == "held_at_send":
            data[name] = pd.array(col.to_pylist(), dtype="boolean")
        else:
            data[name] = col.to_numpy()
    return pd.DataFrame(data)
