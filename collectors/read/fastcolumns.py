"""The fast column builder: the same columns as ``columns.ColumnBuilder``, without a Python step per token.

Why: profiling ``load_run`` on 128-token records with top-2 logprobs showed most of the time in
per-position Python work while a chunk becomes columns (one ``top_gap_counted`` call and one
``usable_logprob`` per alternative, one ``_num`` per logprob), not in parsing the lines. This builder
gathers each chunk's logprobs and alternatives' logprobs into flat lists with one comprehension per
record, converts them with one numpy call per chunk, and computes every position's top-1 - top-2
gap and unusable count over a padded matrix (docs/design.md, "logprob drift" and "fork").

Identical results are the contract: a value whose type the vectorised path cannot prove is a plain
number (a bool, a string, a nested object, a position that is not a list of pairs) sends that record
(or that chunk's logprobs) through the reference code in ``collectors.read.columns`` instead, so NaN,
infinite, absurd and malformed numbers are left out and counted exactly as there.
``tests/collectors/test_fastcolumns_property.py`` checks both builders agree on random records.
Lines are read as bytes and cut (``collectors.read.linecut``): each of the four sequence values is parsed
once per distinct value and shared by the records that repeat it, and each distinct token list or id
list is converted once per chunk; a line that cannot be cut is parsed whole. Texts are interned
(identical completions share one string), so a million records of a few distinct completions do not
hold a million copies of the text (nor of the other repeated strings: ``SHARED``). Reads only the file it
is given, and must not print.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from collectors.jsonl import LINE_LIMIT, bounded_lines
from collectors.read.columns import (
    MAX_ABS_LOGPROB,
    ColumnBuilder,
    FileRead,
    _list_or_none,
    file_read,
    top_gap_counted,
)
from collectors.read.linecut import Cut, cut
from collectors.read.matrices import FloatMatrix, pad_flat, pad_float
from collectors.read.recordcheck import SCALAR_CHECKS, SEQUENCE_CHECKS, check_schema, field_problem, record_problem
from loadgen.core.errors import RunFolderError
from loadgen.core.runfiles import open_lines

_NUMBERS = frozenset((float, int))  # exactly these types convert the way ``usable_logprob`` reads them
_LIST = frozenset((list,))
_PAIR = frozenset((list, tuple))
_NUMBERS_OR_NULL = frozenset((float, int, type(None)))  # ``_num``: a null is NaN, as numpy converts None
_INT = frozenset((int,))
_STR = frozenset((str,))
READ_BUFFER = 1 << 20  # a line is about 13 KB: the default 8 KB buffer would be filled twice per line
_DISTINCT_KEPT = 4096  # distinct sequence values remembered (about 50 MB of 128-token values at most)
_TRIAL_RECORDS = 1024  # after this many records, a field repeated in fewer than a quarter stops being remembered
_FIELDS = ("token_ids", "tokens", "logprobs", "top_logprobs")
# string values that repeat from record to record, each kept once (in ``_texts``): a million records of one canary
# hold one "c0", not a million (about 50 bytes each; 250 MB over these fields at 1,000,000 records)
SHARED = (
    "canary_id",
    "phase",
    "status",
    "error_kind",
    "finish_reason",
    "text",
    "worker",
    "cache_action",
    "request_key",
)


class FastColumnBuilder(ColumnBuilder):
    """``ColumnBuilder`` with lines cut as bytes (``collectors.read.linecut``), each distinct sequence parsed and
    converted once, vectorised chunk conversion and interned texts; same columns, same values."""

    def __init__(self, line_limit: int = LINE_LIMIT) -> None:
        super().__init__(line_limit)
        self._texts: dict[str, str] = {}
        # per sequence field: value bytes -> parsed value and why no column can hold it (``record_problem``), so
        # equal values are parsed and checked once and share one object (None once a field's values were seen not
        # to repeat: each is then parsed as it comes)
        self._parsed: dict[str, dict[bytes, tuple[Any, str | None]] | None] = {k: {} for k in _FIELDS}
        self._repeats = dict.fromkeys(_FIELDS, 0)
        self._cut_records = 0

    def add_file(self, path: Path) -> FileRead:
        try:
            with open_lines(path, buffering=READ_BUFFER) as fh:
                count, _, skipped, malformed = self.add_lines(bounded_lines(fh, path, self.line_limit), path)
        except OSError as exc:
            raise RunFolderError(f"{path}: cannot read ({exc.strerror or exc})") from exc
        return file_read(path, count, skipped, malformed)

    def add_lines(
        self, lines: Iterable[bytes], path: Path, *, first: int = 1
    ) -> tuple[int, int, list[int], dict[int, str]]:
        """Every line of ``lines`` (of ``path``, numbered from ``first``) that is a record: how many were, how many
        lines there were, the numbers of those skipped (not a JSON object, or a record no column can hold;
        blank lines are neither) and, of those, the records' reasons (``record_problem``)."""
        skipped: list[int] = []
        malformed: dict[int, str] = {}
        count = n = 0
        for n, line in enumerate(lines, start=first):
            if line[:1] != b"{" and not line.strip():  # a record starts with "{": no copy of it
                continue
            problem = self.add_line(line, where=f"{path} line {n}", file=path.name)
            if problem is None:
                count += 1
                continue
            skipped.append(n)
            if problem:
                malformed[n] = problem
        return count, n, skipped, malformed

    def add_line(self, line: bytes, *, where: str, file: str) -> str | None:
        """One line of a canary file: None when it was added; else nothing is added and the caller skips it,
        told why: ``""`` for a line that is not a JSON object, the problem for a record no column can hold."""
        parts = cut(line)
        if parts is not None and (got := self._sequences(parts)) is not None:
            row, problem = got
            check_schema(parts.head, where=where)
            if problem or (problem := record_problem(parts.head, SCALAR_CHECKS)):
                return problem
            self._add_scalars(parts.head, where=where, file=file)
            row["engine_batch_sizes"] = parts.head.get("engine_batch_sizes")
            self._add_pending(row)
            return None
        try:
            raw = orjson.loads(line)
        except orjson.JSONDecodeError:
            return ""
        if type(raw) is not dict:
            return ""
        check_schema(raw, where=where)
        if problem := record_problem(raw):
            return problem
        self.add(raw, where=where, file=file)
        return None

    def add(self, raw: dict[str, Any], *, where: str = "record", file: str = "") -> None:
        self._add_scalars(raw, where=where, file=file)
        self._add_pending(_slim(raw))  # the parsed record's other objects are freed now

    def _add_scalars(self, raw: dict[str, Any], *, where: str, file: str) -> None:
        super()._add_scalars(raw, where=where, file=file)
        strings = self._texts
        for k in SHARED:
            column = self._scalars[k]
            if type(value := column[-1]) is str:
                column[-1] = strings.setdefault(value, value)

    def _sequences(self, parts: Cut) -> tuple[dict[str, Any], str | None] | None:
        """The four sequence values of a cut line, each parsed and checked (``record_problem``) once per
        distinct value, and the first problem among them; None when one is not one complete JSON value (the
        caller parses the whole line)."""
        got: dict[str, Any] = {}
        first: str | None = None
        for name in _FIELDS:
            value = getattr(parts, name)
            seen = self._parsed[name]
            known = None if seen is None else seen.get(value)
            if known is None:
                try:
                    parsed = _top(value) if name == "top_logprobs" else orjson.loads(value)
                except orjson.JSONDecodeError:
                    return None
                check = SEQUENCE_CHECKS.get(name)
                known = parsed, None if check is None else field_problem(name, parsed, check)
                if seen is not None:
                    if len(seen) >= _DISTINCT_KEPT:  # many distinct values: keep memory bounded, start again
                        seen.clear()
                    seen[value] = known
            else:
                self._repeats[name] += 1
            got[name] = known[0]
            first = first or known[1]
        self._cut_records += 1
        if self._cut_records == _TRIAL_RECORDS:  # values that rarely repeat are not worth hashing and keeping
            for name, repeats in self._repeats.items():
                if repeats < _TRIAL_RECORDS // 4:
                    self._parsed[name] = None
        return got, first

    def _flat_ids(self, seqs: list[Any], lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        distinct = _distinct(seqs, _INT)
        if distinct is None:
            return super()._flat_ids(seqs, lengths)
        arrays = {k: np.array(s, dtype=np.int64) for k, s in distinct.items()}
        return np.concatenate([arrays[id(s)] for s in seqs if s]) if arrays else np.zeros(0, np.int64)

    def _token_codes(self, seqs: list[Any]) -> npt.NDArray[np.int32]:
        distinct = _distinct(seqs, _STR)
        if distinct is None:
            return super()._token_codes(seqs)
        vocab = self._vocab
        codes = {k: np.array([vocab.setdefault(t, len(vocab)) for t in s], dtype=np.int32) for k, s in distinct.items()}
        return np.concatenate([codes[id(s)] for s in seqs if s]) if codes else np.zeros(0, np.int32)

    def _logprob_matrix(self, seqs: list[list[Any] | None]) -> tuple[FloatMatrix, npt.NDArray[np.int64]]:
        return logprob_matrix(seqs)

    def _gap_matrix(self, tops: list[Any]) -> tuple[FloatMatrix, npt.NDArray[np.int64]]:
        return gap_matrix(tops)


def _distinct(seqs: list[Any], types: frozenset[type]) -> dict[int, list[Any]] | None:
    """Each distinct non-empty list by identity, when every value is None or a list of exactly ``types``."""
    if not all(s is None or type(s) is list for s in seqs):
        return None
    distinct = {id(s): s for s in seqs if s}
    return distinct if all(set(map(type, s)) <= types for s in distinct.values()) else None


def _top(value: bytes) -> _Alternatives | None:
    """A ``top_logprobs`` value's bytes, parsed and reduced by ``_alternatives``."""
    return _alternatives(_list_or_none(orjson.loads(value)))


def logprob_matrix(seqs: list[list[Any] | None]) -> tuple[FloatMatrix, npt.NDArray[np.int64]]:
    """``matrices.pad_float`` in one numpy conversion when every value is a number or null; else it."""
    flat = list(chain.from_iterable(s for s in seqs if s))
    if not set(map(type, flat)) <= _NUMBERS_OR_NULL:
        return pad_float(seqs)
    lengths = np.fromiter((-1 if s is None else len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    mat: FloatMatrix = pad_flat(np.array(flat, dtype=np.float64), lengths, np.nan, np.float64)
    return mat, lengths


def _slim(raw: dict[str, Any]) -> dict[str, Any]:
    """The sequences a chunk is built from; the alternatives already reduced to ``_Alternatives``."""
    return {
        "token_ids": raw.get("token_ids"),
        "tokens": raw.get("tokens"),
        "logprobs": raw.get("logprobs"),
        "top_logprobs": _alternatives(_list_or_none(raw.get("top_logprobs"))),
        "engine_batch_sizes": raw.get("engine_batch_sizes"),
    }


@dataclass(slots=True)
class _Alternatives:
    """One record's ``top_logprobs`` reduced: its positions, and either every alternative's logprob with the
    number of alternatives at each position (``values``, ``widths``), or, for a record the vectorised
    path cannot prove plain, the reference gaps and unusable count."""

    positions: int
    values: list[Any] | None = None
    widths: list[int] | None = None
    gaps: list[float] | None = None
    unusable: int = 0


def _alternatives(top: list[Any] | None) -> _Alternatives | None:
    if top is None:
        return None
    vals = _pair_logprobs(top)
    if vals is not None:
        return _Alternatives(len(top), vals, list(map(len, top)))
    counted = [top_gap_counted(p) for p in top]
    return _Alternatives(len(top), gaps=[g for g, _ in counted], unusable=sum(k for _, k in counted))


def gap_matrix(tops: list[Any]) -> tuple[FloatMatrix, npt.NDArray[np.int64]]:
    """Each record's top-1 - top-2 gap per position (padded with NaN) and its count of unusable
    alternatives, as ``columns.top_gap_counted`` defines both, for one chunk of records (each a
    ``top_logprobs`` value, or that value already reduced by ``_alternatives``)."""
    tops = [t if isinstance(t, _Alternatives) else _alternatives(_list_or_none(t)) for t in tops]
    n = len(tops)
    lengths = np.full(n, -1, dtype=np.int64)
    unusable = np.zeros(n, dtype=np.int64)
    values: list[Any] = []  # every alternative's logprob, records whose alternatives are all [token, number] pairs
    widths: list[int] = []  # alternatives at each of their positions
    fast_rows: list[int] = []
    slow: dict[int, list[float]] = {}
    for i, top in enumerate(tops):
        if top is None:
            continue
        lengths[i] = top.positions
        if top.values is not None and top.widths is not None:
            values.extend(top.values)
            widths.extend(top.widths)
            fast_rows.append(i)
        else:
            slow[i] = top.gaps or []
            unusable[i] += top.unusable
    pos_gap, pos_bad = _segment_gaps(np.array(values, dtype=np.float64), np.array(widths, dtype=np.int64))
    fast = np.array(fast_rows, dtype=np.int64)
    per_row = lengths[fast]
    if len(fast):
        owner = np.repeat(np.arange(len(fast)), per_row)
        unusable[fast] += np.bincount(owner, weights=pos_bad, minlength=len(fast)).astype(np.int64)
    if not slow:
        flat = pos_gap
    else:  # rows in order: each fast row's slice of pos_gap, each slow row's own gaps
        starts = np.concatenate([[0], np.cumsum(per_row)])
        where = {int(r): k for k, r in enumerate(fast_rows)}
        pieces: list[Any] = []
        for i in range(n):
            if i in slow:
                pieces.append(np.array(slow[i], dtype=np.float64))
            elif i in where:
                k = where[i]
                pieces.append(pos_gap[starts[k] : starts[k + 1]])
        flat = np.concatenate(pieces) if pieces else np.zeros(0)
    return pad_flat(flat, lengths, np.nan, np.float64), unusable


def _pair_logprobs(top: list[Any]) -> list[Any] | None:
    """Every alternative's logprob, position by position, when every position is a list of ``[token, number]``
    pairs (lists or tuples of two or more, a number being an int or a float, never a bool); else None."""
    if not set(map(type, top)) <= _LIST:
        return None
    alts = list(chain.from_iterable(top))
    if not set(map(type, alts)) <= _PAIR:
        return None
    try:
        vals = [alt[1] for alt in alts]
    except IndexError:  # an alternative with fewer than two items
        return None
    return vals if set(map(type, vals)) <= _NUMBERS else None


def _segment_gaps(values: FloatMatrix, widths: npt.NDArray[np.int64]) -> tuple[FloatMatrix, FloatMatrix]:
    """Per position (a segment of ``widths[j]`` alternatives' logprobs): the largest usable value minus the
    second largest (NaN with fewer than two usable ones), and how many were not usable."""
    if len(widths) == 0:
        return np.zeros(0), np.zeros(0)
    two = int(widths.min()) == int(widths.max()) == 2  # two alternatives everywhere: no padding, no sort
    if two and values.min() >= -MAX_ABS_LOGPROB and values.max() <= MAX_ABS_LOGPROB:  # all usable (NaN fails both)
        return np.abs(values[0::2] - values[1::2]), np.zeros(len(widths))
    with np.errstate(invalid="ignore"):
        usable = np.abs(values) <= MAX_ABS_LOGPROB  # NaN and the infinities fail
    keyed = np.where(usable, values, -np.inf)
    if two:
        a, b = keyed[0::2], keyed[1::2]
        good = usable[0::2].astype(np.int8) + usable[1::2]
        with np.errstate(invalid="ignore"):  # -inf - -inf where fewer than two are usable: replaced by NaN
            return np.where(good == 2, np.abs(a - b), np.nan), (2 - good).astype(np.float64)
    k = max(int(widths.max()), 2)
    mat = pad_flat(keyed, widths, -np.inf, np.float64)
    if mat.shape[1] < k:
        mat = np.hstack([mat, np.full((len(widths), k - mat.shape[1]), -np.inf)])
    mat.sort(axis=1)
    good = np.isfinite(mat).sum(axis=1)
    with np.errstate(invalid="ignore"):  # -inf - -inf where fewer than two are usable: replaced by NaN
        gap = np.where(good >= 2, mat[:, -1] - mat[:, -2], np.nan)
    bad = (widths - good).astype(np.float64)
    return gap, bad
