"""The canary columns file: beside each ``canaries*.jsonl``, its records' sequences as fixed-layout binary.

Why: a 128-token record with top-2 alternatives is about 13 KB of JSON, and parsing that is the floor of
reading a run folder (about ten thousand records a second per core). The collector that writes a record's
JSONL line also appends, here, what the report reads of it in numpy's own layout, so the reader maps the
files and slices them (docs/design.md, "the canary columns file"). The JSONL stays the truth: this is a
derived copy that covers a prefix of it, and whatever it does not cover, or does not match, is read from
the JSONL (``collectors.read.sidecar``).

One folder ``<stem>.columns/`` per JSONL file, nine files appended per record, the index row last:

- ``head``: the record's JSON without its four sequences (orjson, as the JSONL line writes the rest),
  and a comma;
- ``ids`` (int64), ``lp`` (float64, NaN for a null): the token ids and chosen-token logprobs;
- ``codes`` (int32): the token strings as codes into ``vocab``, one JSON string a line, each string
  appended when the file first meets it (so codes are in first-seen order);
- ``top`` (float64): every alternative's logprob, position by position (``k`` per position), and ``alts`` (int32):
  each alternative's token string as a code into ``altvocab`` (kept as ``vocab`` is, apart: the report's
  vocabulary holds the tokens alone);
- ``index``: one ``INDEX`` row: where the record's JSONL line ends, its line number, how many bytes or values it
  has in each file (``-1`` for a null sequence) and the two vocabularies' sizes.

Each row holds everything its JSONL line says, so the reader can write the line again from the row and compare
(``collectors.rowline``); the writer does so before it appends. A record this layout cannot hold exactly (a value
that is not a plain number, an id that is not an integer 0 or more, positions of unequal width, a line the row
does not give back byte for byte), a failed write here or in the JSONL, or a JSONL file that was not empty when
opened ends the coverage for good: the writer stops and the reader reads the rest from the JSONL. Imports numpy
and orjson only: it runs in the Locust process, where each append is a few numpy conversions, the line written
again (tens of microseconds, once per canary record) and at most nine unbuffered writes (no batching, nothing
that blocks the gevent loop for longer than a record takes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson

from collectors.rowline import LineWriter, Rows, cut_at
from loadgen.core.errors import RunFolderError
from loadgen.core.record import CanaryRecord
from loadgen.core.runfiles import open_append

INDEX = np.dtype(
    [
        ("jsonl_end", "<i8"),  # byte offset just after this record's line in the JSONL file
        ("line", "<i8"),  # the line's 1-based number
        ("alt_vocab", "<i4"),  # strings in ``altvocab`` once this record's new ones are appended
        ("head", "<i4"),  # bytes in ``head``
        ("n_ids", "<i4"),  # values in ``ids``; -1: null
        ("n_lp", "<i4"),  # values in ``lp``; -1: null
        ("n_top", "<i4"),  # positions of ``top_logprobs``; -1: null
        ("k", "<i4"),  # alternatives at each of those positions
        ("n_tok", "<i4"),  # values in ``codes``; -1: null
        ("vocab", "<i4"),  # strings in ``vocab`` once this record's new ones are appended
    ]
)
FILES = ("head", "ids", "lp", "top", "alts", "codes", "vocab", "altvocab", "index")
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
    alts: list[str]  # each alternative's token string, position by position
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
    names: list[str] = []
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
        names = [a[0] for a in alts]
        if not set(map(type, values)) <= _NUMBER_OR_NULL or not set(map(type, names)) <= _STR:
            return None
        top = np.array(values, dtype=np.float64)
        n_top = len(positions)
    return Encoded(head, ids, lp, top, names, n_top, k)


class _Words:
    """One of the file's vocabularies: each string's code, in first-seen order, and how many are in its file."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self.written = 0

    def of(self, strings: Any) -> np.ndarray[Any, np.dtype[np.int32]] | bool | None:
        """``strings`` as codes (new ones coded in first-seen order); None for null; False where they are not a
        list of strings."""
        if strings is None:
            return None
        if type(strings) is not list or not set(map(type, strings)) <= _STR:
            return False
        codes = self.codes
        return np.array([codes.setdefault(t, len(codes)) for t in strings], dtype=np.int32)

    def fresh(self) -> list[str]:
        """The strings coded since the last call."""
        new = list(itertools.islice(reversed(self.codes), len(self.codes) - self.written))[::-1]
        self.written = len(self.codes)
        return new


class SidecarWriter:
    """Appends each record the JSONL writer wrote whole; stops for good at the first one it cannot."""

    def __init__(self, jsonl: Path) -> None:
        self._files: dict[str, BinaryIO] = {}
        self._end = 0
        self._line = 0
        self._tokens = _Words()
        self._alts = _Words()
        self._lines = LineWriter()  # each row's line written again, to compare with the JSONL's
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
            codes = self._tokens.of(record.tokens)
            alts = self._alts.of(got.alts if got is not None else [])
            cut = None if got is None else cut_at(got.head)
            if got is None or cut is None or isinstance(codes, bool) or not isinstance(alts, np.ndarray):
                self.stop()
                return
            words, alt_words = self._tokens.fresh(), self._alts.fresh()
            self._lines.add_words(words, alt_words)
            if self._line_of(got, codes, alts, cut) != line:  # the reader would not trust this row: stop here
                self.stop()
                return
            row = np.zeros(1, INDEX)
            row[0] = (
                self._end,
                self._line,
                len(self._alts.codes),
                len(got.head),
                -1 if got.ids is None else got.ids.size,
                -1 if got.lp is None else got.lp.size,
                got.n_top,
                max(got.k, 0),
                -1 if codes is None else codes.size,
                len(self._tokens.codes),
            )
            self._put("head", got.head)
            for name, values in (("ids", got.ids), ("lp", got.lp), ("top", got.top), ("alts", alts), ("codes", codes)):
                if values is not None and values.size:
                    self._put(name, values.tobytes())
            for name, new in (("vocab", words), ("altvocab", alt_words)):
                if new:
                    self._put(name, b"".join(orjson.dumps(w) + b"\n" for w in new))
            self._put("index", row.tobytes())
        except (OSError, ValueError, TypeError, OverflowError):
            self.stop()

    def _line_of(self, got: Encoded, codes: Any, alts: Any, cut: int) -> bytes | None:
        """The JSONL line the reader would write again from this row (``collectors.rowline``)."""
        empty_f, empty_i = np.zeros(0, np.float64), np.zeros(0, np.int32)
        rows = Rows(
            heads=[got.head],
            n_ids=np.array([-1 if got.ids is None else got.ids.size]),
            n_tok=np.array([-1 if codes is None else codes.size]),
            n_lp=np.array([-1 if got.lp is None else got.lp.size]),
            n_top=np.array([got.n_top]),
            k=np.array([max(got.k, 0)]),
            ids=np.zeros(0, np.int64) if got.ids is None else got.ids,
            codes=empty_i if codes is None else codes,
            lp=empty_f if got.lp is None else got.lp,
            top=empty_f if got.top is None else got.top,
            alts=alts,
        )
        lines = self._lines.lines(rows, [cut])
        return None if lines is None else lines[0]

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
