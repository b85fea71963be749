"""The canary columns file: beside each ``canaries*.jsonl``, its records' sequences as fixed-layout binary.

Why: a 128-token record with top-2 alternatives is about 13 KB of JSON, and parsing that is the floor of
reading a run folder (about ten thousand records a second per core). The collector that writes a record's
JSONL line also appends, here, what the report reads of it in numpy's own layout, so the reader maps the
files and slices them (docs/design.md, "the canary columns file"). The JSONL stays the truth: this is a
derived copy that covers a prefix of it, and whatever it does not cover, or does not match, is read from
the JSONL (``collectors.read.sidecar``).

One folder ``<stem>.columns/`` per JSONL file, seven files appended per record, the index row last:

- ``head``: the record's JSON without its four sequences (orjson, as the JSONL line writes the rest),
  and a comma;
- ``ids`` (int64), ``lp`` (float64, NaN for a null): the token ids and chosen-token logprobs;
- ``top`` (float64): every alternative's logprob, position by position (``k`` per position);
- ``codes`` (int32): the token strings as codes into ``vocab``, one JSON string a line, each string
  appended when the file first meets it (so codes are in first-seen order);
- ``index``: one ``INDEX`` row: where the record's JSONL line ends, its line number and CRC-32, how
  many bytes or values it has in each file (``-1`` for a null sequence) and the vocabulary's size.

A record this layout cannot hold exactly (a value that is not a plain number, an id that is not an
integer 0 or more, positions of unequal width), a failed write here or in the JSONL, or a JSONL file
that was not empty when opened ends the coverage for good: the writer stops and the reader reads the
rest from the JSONL. Imports numpy and orjson only: it runs in the Locust process, where each append
is a few numpy conversions and at most seven unbuffered writes (no batching, nothing that blocks the gevent
loop for longer than a record takes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import zlib
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson

from loadgen.core.errors import RunFolderError
from loadgen.core.record import CanaryRecord
from loadgen.core.runfiles import open_append

INDEX = np.dtype(
    [
        ("jsonl_end", "<i8"),  # byte offset just after this record's line in the JSONL file
        ("line", "<i8"),  # the line's 1-based number
        ("crc", "<u4"),  # zlib.crc32 of the line's bytes, its newline included
        ("head", "<i4"),  # bytes in ``head``
        ("n_ids", "<i4"),  # values in ``ids``; -1: null
        ("n_lp", "<i4"),  # values in ``lp``; -1: null
        ("n_top", "<i4"),  # positions of ``top_logprobs``; -1: null
        ("k", "<i4"),  # alternatives at each of those positions
        ("n_tok", "<i4"),  # values in ``codes``; -1: null
        ("vocab", "<i4"),  # strings in ``vocab`` once this record's new ones are appended
    ]
)
FILES = ("head", "ids", "lp", "top", "codes", "vocab", "index")
_SEQUENCES = frozenset(("token_ids", "tokens", "logprobs", "top_logprobs"))
_STR = frozenset((str,))
HEAD_FIELDS = tuple(f.name for f in dataclasses.fields(CanaryRecord) if f.name not in _SEQUENCES)
_INT = frozenset((int,))
_NUMBER_OR_NULL = frozenset((float, int, type(None)))
_PAIRS = frozenset((list, tuple))
_LINE = orjson.OPT_SERIALIZE_NUMPY


def columns_dir(jsonl: Path) -> Path:
    """The columns folder of a canary JSONL file: ``canaries-w1.jsonl`` -> ``canaries-w1.columns``."""
    return jsonl.with_suffix(".columns")


@dataclasses.dataclass(frozen=True, slots=True)
class Encoded:
    head: bytes  # a JSON object and a comma: a chunk of heads reads as one JSON array
    ids: np.ndarray[Any, np.dtype[np.int64]] | None
    lp: np.ndarray[Any, np.dtype[np.float64]] | None
    top: np.ndarray[Any, np.dtype[np.float64]] | None
    n_top: int
    k: int


def encode(record: CanaryRecord) -> Encoded | None:
    """The record in this layout, or None where the layout cannot hold it exactly."""
    head = orjson.dumps({name: getattr(record, name) for name in HEAD_FIELDS}, option=_LINE) + b","
    ids = lp = top = None
    if record.token_ids is not None:
        if type(record.token_ids) is not list or not set(map(type, record.token_ids)) <= _INT:
            return None
        ids = np.array(record.token_ids, dtype=np.int64)  # OverflowError beyond int64: the caller stops
        if ids.size and int(ids.min()) < 0:
            return None
    if record.logprobs is not None:
        if type(record.logprobs) is not list or not set(map(type, record.logprobs)) <= _NUMBER_OR_NULL:
            return None
        lp = np.array(record.logprobs, dtype=np.float64)
    n_top = k = -1
    if record.top_logprobs is not None:
        positions = record.top_logprobs
        if type(positions) is not list or not set(map(type, positions)) <= _PAIRS:
            return None
        widths = set(map(len, positions))
        if len(widths) > 1:
            return None
        k = widths.pop() if widths else 0
        alts = [alt for pos in positions for alt in pos]
        if not set(map(type, alts)) <= _PAIRS or not all(len(a) == 2 for a in alts):
            return None
        values = [a[1] for a in alts]
        if not set(map(type, values)) <= _NUMBER_OR_NULL:
            return None
        top = np.array(values, dtype=np.float64)
        n_top = len(positions)
    return Encoded(head, ids, lp, top, n_top, k)


class SidecarWriter:
    """Appends each record the JSONL writer wrote whole; stops for good at the first one it cannot."""

    def __init__(self, jsonl: Path) -> None:
        self._files: dict[str, BinaryIO] = {}
        self._end = 0
        self._line = 0
        self._vocab: dict[str, int] = {}
        self._written_vocab = 0
        self.live = False
        try:
            if jsonl.exists() and jsonl.stat().st_size:  # lines before ours: their numbers are not known here
                return
            folder = columns_dir(jsonl)
            folder.mkdir()  # a folder already there is not this writer's: nothing is appended to it
            self._files = {name: open_append(folder / name) for name in FILES}
            self.live = True
        except (OSError, RunFolderError):
            self.stop()

    def append(self, record: CanaryRecord, line: bytes) -> None:
        """``record``, whose JSONL ``line`` was just written whole."""
        if not self.live:
            return
        self._end += len(line)
        self._line += 1
        try:
            got = encode(record)
            codes = self._codes(record.tokens)
            if got is None or isinstance(codes, bool):
                self.stop()
                return
            new = len(self._vocab) - self._written_vocab
            words = [orjson.dumps(w) + b"\n" for w in itertools.islice(reversed(self._vocab), new)][::-1]
            row = np.zeros(1, INDEX)
            row[0] = (
                self._end,
                self._line,
                zlib.crc32(line),
                len(got.head),
                -1 if got.ids is None else got.ids.size,
                -1 if got.lp is None else got.lp.size,
                got.n_top,
                max(got.k, 0),
                -1 if codes is None else codes.size,
                len(self._vocab),
            )
            self._put("head", got.head)
            for name, values in (("ids", got.ids), ("lp", got.lp), ("top", got.top), ("codes", codes)):
                if values is not None and values.size:
                    self._put(name, values.tobytes())
            if words:
                self._put("vocab", b"".join(words))
                self._written_vocab = len(self._vocab)
            self._put("index", row.tobytes())
        except (OSError, ValueError, TypeError, OverflowError):
            self.stop()

    def _codes(self, tokens: Any) -> np.ndarray[Any, np.dtype[np.int32]] | bool | None:
        """The tokens as codes into this file's vocabulary (new strings coded in first-seen order); None for
        null; False where they are not a list of strings."""
        if tokens is None:
            return None
        if type(tokens) is not list or not set(map(type, tokens)) <= _STR:
            return False
        vocab = self._vocab
        return np.array([vocab.setdefault(t, len(vocab)) for t in tokens], dtype=np.int32)

    def _put(self, name: str, data: bytes) -> None:
        fh = self._files[name]
        with memoryview(data) as view:
            done = 0
            while done < len(view):
                n = fh.write(view[done:])
                if not n:
                    raise OSError("write took no bytes")
                done += n

    def stop(self) -> None:
        """No more appends: the reader reads every later record from the JSONL."""
        self.live = False
        for fh in self._files.values():
            with contextlib.suppress(OSError):
                fh.close()
        self._files = {}

    close = stop
