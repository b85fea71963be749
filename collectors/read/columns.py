"""Canary records as columns: the column types, the number rules and the reference column builder.

Why: a run can hold a million canary records; building a million dataclasses and nested lists would
be slow and would not fit in memory, so each record is poured straight into numpy columns (padded
token matrices, chunk by chunk). ``CanaryRecord`` stays the one definition of the fields: required
keys and the schema number come from it. ``ColumnBuilder`` here is the reference definition of every
column; ``collectors.read.fastcolumns`` builds the same columns faster and is checked against it.

Numbers no analysis can use: a logprob or an alternative's logprob that is null, not a number, NaN,
infinite or beyond ``MAX_ABS_LOGPROB`` (``±1.7e308`` would overflow every difference), and a time
that is not finite, become NaN (missing) and are counted per record in ``unusable_numbers``. A record
whose value no column can hold (``record_problem``: token ids that are not a list of integers 0 or
more, a canary id that is not a string, a level that is not a count, ...) is skipped, and its line and
the reason are kept in ``FileRead.malformed``: one odd record among thousands does not lose the run.
Raises ``RunFolderError`` (naming the file) for an unknown schema or a missing required field. Must
not print, and must not import Locust or anything under ``loadgen`` but errors.
"""

from __future__ import annotations

import dataclasses
import hashlib
import mmap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pandas as pd  # type: ignore[import-untyped]

from collectors.jsonl import iter_numbered
from collectors.read.coresidency import segment_stats
from loadgen.core.errors import RunFolderError
from loadgen.core.record import SCHEMA, CanaryRecord
from loadgen.core.runfiles import open_regular
from loadgen.core.wire.plausible import usage_problem

_CHUNK_ROWS = 8192
_REQUIRED = frozenset(
    f.name
    for f in dataclasses.fields(CanaryRecord)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)
# Scalar record fields kept as frame columns (token sequences go to matrices instead).
SCALARS = (
    "canary_id",
    "request_id",
    "phase",
    "level",
    "inflight_at_send",
    "sent_at",
    "status",
    "latency_s",
    "ttft_s",
    "error_kind",
    "http_status",
    "error_message",
    "finish_reason",
    "text",
    "engine_running",
    "worker",
    "burst",
    "held_at_send",
    "background_held_at_send",
    "level_bound",
    "cache_action",
    "cache_reset_status",
    "cache_reset_ok",
)
_FLOAT_COLS = (
    "sent_at",
    "latency_s",
    "ttft_s",
    "engine_running",
    "temperature",
    "cached_tokens",
    "prompt_tokens",
    "background_held_at_send",
    "cache_reset_status",
)
# Derived while reading from ``engine_batch_sizes`` (the engine's batch size at every step the request
# was in): the other requests it shared those steps with (size - 1). NaN where the record has none.
BATCH_OTHERS = ("batch_others_min", "batch_others_median", "batch_others_max")
_INT_COLS = ("level", "inflight_at_send")
# Beyond any real logprob (engines clamp a zero probability to about -1e4) and far from float overflow:
# a larger magnitude is a broken number, left out rather than allowed to swamp a drift or a chart.
MAX_ABS_LOGPROB = 1e6

IntMatrix = npt.NDArray[np.integer[Any]]
FloatMatrix = npt.NDArray[np.float64]


@dataclass
class CanaryColumns:
    """Canary records as columns. Row i of every matrix is row i of ``frame``.

    Matrices are padded: ``-1`` past a row's length in the integer ones, NaN in the float ones; a row
    whose record lacked the sequence has length ``-1`` in ``frame`` (``n_ids``, ``n_tokens``,
    ``n_logprobs``). Widths may differ between matrices.
    """

    frame: Any  # pandas.DataFrame: SCALARS plus file, temperature, request_key, cached_tokens, n_ids, n_tokens,
    # n_logprobs, BATCH_OTHERS, unusable_numbers (values of the record left out as NaN: see the module doc),
    # usage_problem (what no engine could report in the record's usage, ``loadgen.core.wire.plausible``; or None).
    # ``burst`` is bool (False where absent), ``held_at_send`` pandas "boolean" (NA where absent),
    # ``background_held_at_send`` float (NaN where absent).
    token_ids: IntMatrix  # (n, w) int32 or int64
    token_codes: IntMatrix  # (n, w) int32 codes into ``vocab``
    vocab: npt.NDArray[np.object_]  # token strings
    logprobs: FloatMatrix  # (n, w) chosen-token logprobs
    top_gap: FloatMatrix  # (n, w) top-1 minus top-2 logprob at each position

    @property
    def n(self) -> int:
        return len(self.frame)


@dataclass
class FileRead:
    name: str
    records: int
    skipped: int
    skipped_lines: list[int]
    torn_tail: bool = False  # the last line has no newline and is not a record: a write cut short
    # of ``skipped_lines``, those that were JSON objects no column can hold: line -> why (``record_problem``)
    malformed: dict[int, str] = field(default_factory=dict)
    # the file's columns file (``collectors.sidecar``) did not match it and was not used: why, in words
    columns_notice: str | None = None


_INT64_MAX = 2**63 - 1
_INTS = frozenset((int,))
_STRS = frozenset((str,))


def _ids_ok(v: Any) -> bool:
    return v is None or (
        type(v) is list and (not v or (set(map(type, v)) <= _INTS and min(v) >= 0 and max(v) <= _INT64_MAX))
    )


def _strings_ok(v: Any) -> bool:
    return v is None or (type(v) is list and set(map(type, v)) <= _STRS)


def _count_ok(v: Any) -> bool:
    return v is None or (type(v) is int and 0 <= v <= _INT64_MAX)


Check = tuple[Callable[[Any], bool], str]
# the sequences first, then the scalars: both builders check in this order, so they name the same field
SEQUENCE_CHECKS: dict[str, Check] = {
    "token_ids": (_ids_ok, "null or a list of token ids (integers 0 or more)"),
    "tokens": (_strings_ok, "null or a list of strings"),
}
SCALAR_CHECKS: dict[str, Check] = {
    "canary_id": (lambda v: type(v) is str, "a string"),
    "level": (_count_ok, "null or an integer 0 or more"),
    "inflight_at_send": (_count_ok, "null or an integer 0 or more"),
    "text": (lambda v: v is None or type(v) is str, "null or a string"),
}


def shown(value: Any, limit: int = 40) -> str:
    """``value`` as JSON, cut to about ``limit`` characters: what a message quotes of a field."""
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def field_problem(name: str, value: Any, check: Check) -> str | None:
    ok, expected = check
    return None if ok(value) else f"{name} is {shown(value)}, expected {expected}"


def record_problem(raw: Mapping[str, Any], checks: Mapping[str, Check] | None = None) -> str | None:
    """Why a decoded canary record cannot become a row of the columns (the field, what it holds and what
    was expected), or None. Only the keys present are checked; by default every field of
    ``SEQUENCE_CHECKS`` and ``SCALAR_CHECKS``. The other fields have rules of their own: a logprob, an
    alternative or a time that is no usable number becomes NaN and is counted (``unusable_numbers``); a
    request, usage or batch-size list of another shape counts as absent."""
    for name, check in (checks if checks is not None else _ALL_CHECKS).items():
        if name in raw and (problem := field_problem(name, raw[name], check)):
            return problem
    return None


_ALL_CHECKS = {**SEQUENCE_CHECKS, **SCALAR_CHECKS}


def _torn_tail(path: Path, skipped: list[int]) -> bool:
    """The file's last line was skipped and lacks its newline: a write cut short, not corruption."""
    if not skipped:
        return False
    try:
        with open_regular(path) as fh:
            fh.seek(0, 2)
            if fh.tell() == 0:
                return False
            fh.seek(-1, 2)
            return fh.read(1) != b"\n"
    except OSError:
        return False


def usable_logprob(v: Any) -> float | None:
    """``v`` as a logprob an analysis can use: a finite number within ``MAX_ABS_LOGPROB``; else None."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if -MAX_ABS_LOGPROB <= f <= MAX_ABS_LOGPROB else None  # NaN fails both comparisons


def top_gap(top: list[list[Any]] | None) -> float:
    """Top-1 minus top-2 logprob among one position's alternatives; NaN with fewer than two usable ones."""
    return top_gap_counted(top)[0]


def top_gap_counted(top: Any) -> tuple[float, int]:
    """``top_gap`` and how many alternatives were left out (not a ``[token, logprob]`` pair with a usable
    logprob: ``usable_logprob``)."""
    if not isinstance(top, list):
        return float("nan"), 0 if top is None else 1
    values = [usable_logprob(alt[1]) if isinstance(alt, list | tuple) and len(alt) >= 2 else None for alt in top]
    good = sorted((v for v in values if v is not None), reverse=True)
    bad = len(values) - len(good)
    return (good[0] - good[1] if len(good) >= 2 else float("nan")), bad


def _lengths(seqs: list[Any]) -> npt.NDArray[np.int64]:
    return np.fromiter((-1 if s is None else len(s) for s in seqs), dtype=np.int64, count=len(seqs))


def pad_flat(flat: npt.NDArray[Any], lengths: npt.NDArray[np.int64], fill: float, dtype: Any) -> Any:
    """Scatter a flat array of concatenated sequences into a padded matrix, one row per length."""
    mat = np.full((len(lengths), int(lengths.max(initial=0))), fill, dtype=dtype)
    mat[np.arange(mat.shape[1]) < lengths[:, None]] = flat
    return mat


def pad_int(seqs: list[list[int] | None]) -> tuple[IntMatrix, npt.NDArray[np.int64]]:
    """Padded int matrix (-1 past each length) and lengths (-1 for a missing sequence)."""
    lengths = _lengths(seqs)
    return pad_ids(flat_ints(seqs, lengths), lengths), lengths


def flat_ints(seqs: list[Any], lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The sequences' values concatenated (``lengths``: theirs, -1 for a missing one)."""
    return np.fromiter(chain.from_iterable(s for s in seqs if s), dtype=np.int64, count=int(lengths.clip(0).sum()))


def pad_ids(flat: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]) -> IntMatrix:
    """``flat`` scattered into a matrix padded with -1: int32 unless a value needs int64."""
    dtype = np.int32 if (flat.size == 0 or int(flat.max()) < 2**31 - 1) else np.int64
    mat: IntMatrix = pad_flat(flat, lengths, -1, dtype)
    return mat


def pad_float(seqs: list[list[float | None] | None]) -> tuple[FloatMatrix, npt.NDArray[np.int64]]:
    """Padded float matrix (NaN past each length and for a null value or a non-number) and lengths."""
    lengths = _lengths(seqs)
    flat = np.fromiter(
        (_num(v) for v in chain.from_iterable(s for s in seqs if s)),
        dtype=np.float64,
        count=int(lengths.clip(0).sum()),
    )
    return pad_flat(flat, lengths, np.nan, np.float64), lengths


def filled(shape: tuple[int, int], fill: float, dtype: Any) -> Any:
    """``np.full(shape, fill, dtype)``, a big matrix in memory mapped here rather than by numpy: numpy asks Linux
    for transparent huge pages for a big array (``madvise``), and on the 2-core development machine (a VM) first
    touching those was 3 to 6 times slower than plain pages: 3 GB took 3.9-6.9 s against 1.1-1.7 s, a quarter
    of reading a million records (docs/performance.md)."""
    size = shape[0] * shape[1] * np.dtype(dtype).itemsize
    if size < _MAPPED_FROM:
        return np.full(shape, fill, dtype)
    mat = np.frombuffer(mmap.mmap(-1, size), dtype=dtype).reshape(shape)
    mat.fill(fill)
    return mat


_MAPPED_FROM = 1 << 24


def _widen(mats: list[Any], fill: float) -> Any:
    """The matrices stacked, padded with ``fill`` to the widest. Consumes ``mats``: each entry is let go
    once it is copied, so stacking needs the pieces plus the result, not twice the whole."""
    if len(mats) == 1:  # one part is already the whole: no copy
        only, mats[0] = mats[0], _GONE
        return only
    w = max((m.shape[1] for m in mats), default=0)
    dtype = np.result_type(*mats) if mats else np.int32
    out = filled((sum(m.shape[0] for m in mats), w), fill, dtype)
    r = 0
    for k in range(len(mats)):
        m, mats[k] = mats[k], _GONE
        out[r : r + m.shape[0], : m.shape[1]] = m
        r += m.shape[0]
    return out


_GONE = np.zeros((0, 0), np.int32)  # stands for a matrix already copied into a stacked one


def cached_tokens(usage: Any) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens`` where the server reports it, else None."""
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    value = details.get("cached_tokens") if isinstance(details, dict) else None
    return int(value) if isinstance(value, int | float) else None


REQUEST_VALUES = ("temperature", "request_key")
USAGE_VALUES = ("cached_tokens", "prompt_tokens", "usage_problem")


def request_values(request: Any) -> tuple[Any, str]:
    """A record's ``request``: its temperature, and a key equal for bodies equal but for a cache salt."""
    request = request if isinstance(request, dict) else {}
    sampling = request.get("sampling_params")  # SGLang /generate keeps sampling there
    temperature = sampling.get("temperature") if isinstance(sampling, dict) else request.get("temperature")
    # a per-request cache salt (SGLang /generate: extra_key) is meant to differ; the rest of the body must not
    keyed = {k: v for k, v in request.items() if k not in ("cache_salt", "extra_key")}
    return temperature, hashlib.blake2b(orjson.dumps(keyed, option=orjson.OPT_SORT_KEYS), digest_size=8).hexdigest()


def usage_values(usage: Any) -> tuple[int | None, Any, str | None]:
    """A record's ``usage``: its cached tokens, prompt tokens, and what no engine could report in it."""
    prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return cached_tokens(usage), prompt, usage_problem(usage)


class ColumnBuilder:
    """Accumulates canary records chunk by chunk into ``CanaryColumns``; also used for synthetic runs."""

    def __init__(self) -> None:
        extra = ("file", "temperature", "request_key", "cached_tokens", "prompt_tokens", "usage_problem")
        self._scalars: dict[str, list[Any]] = {k: [] for k in (*SCALARS, *extra)}
        self._ids: list[IntMatrix] = []
        self._codes: list[IntMatrix] = []
        self._lps: list[FloatMatrix] = []
        self._gaps: list[FloatMatrix] = []
        self._lens: dict[str, list[npt.NDArray[np.int64]]] = {"n_ids": [], "n_tokens": [], "n_logprobs": []}
        self._batch: dict[str, list[FloatMatrix]] = {k: [] for k in BATCH_OTHERS}
        self._unusable: list[npt.NDArray[np.int64]] = []
        self._vocab: dict[str, int] = {}
        self._pending: list[dict[str, Any]] = []

    def add_file(self, path: Path) -> FileRead:
        """Stream one canaries*.jsonl file in; a torn or corrupt line, or a record no column can hold, is
        skipped and counted."""
        skipped: list[int] = []
        malformed: dict[int, str] = {}
        count = 0
        for n, row in iter_numbered(path, skipped):
            check_schema(row, where=f"{path} line {n}")
            if problem := record_problem(row):
                skipped.append(n)
                malformed[n] = problem
                continue
            count += 1
            self.add(row, where=f"{path} line {n}", file=path.name)
        skipped.sort()
        return file_read(path, count, skipped, malformed)

    def add(self, raw: dict[str, Any], *, where: str = "record", file: str = "") -> None:
        self._add_scalars(raw, where=where, file=file)
        self._add_pending(raw)

    def _add_pending(self, row: dict[str, Any]) -> None:
        """Keep what the chunk's matrices are built from (``_flush`` reads the sequence fields of ``row``)."""
        self._pending.append(row)
        if len(self._pending) >= _CHUNK_ROWS:
            self._flush()

    def _add_scalars(self, raw: dict[str, Any], *, where: str, file: str) -> None:
        """Check the record's schema and required fields; append its frame values."""
        check_schema(raw, where=where)
        for k in SCALARS:
            self._scalars[k].append(raw.get(k))
        self._scalars["file"].append(file)
        for k, v in zip(REQUEST_VALUES, request_values(raw.get("request")), strict=True):
            self._scalars[k].append(v)
        for k, v in zip(USAGE_VALUES, usage_values(raw.get("usage")), strict=True):
            self._scalars[k].append(v)

    def _flush(self) -> None:
        rows, self._pending = self._pending, []
        if not rows:
            return
        id_seqs = [r.get("token_ids") for r in rows]
        n_ids = _lengths(id_seqs)
        self._ids.append(pad_ids(self._flat_ids(id_seqs, n_ids), n_ids))
        self._lens["n_ids"].append(n_ids)
        self._codes.append(self._encode([r.get("tokens") for r in rows]))
        lps, n_lps = self._logprob_matrix([_list_or_none(r.get("logprobs")) for r in rows])
        # null, NaN, infinite or absurd logprobs inside a sequence: left out (NaN) and counted per record
        within = np.arange(lps.shape[1]) < n_lps[:, None]
        with np.errstate(invalid="ignore"):
            bad = within & ~(np.abs(lps) <= MAX_ABS_LOGPROB)
        lps[bad] = np.nan
        unusable = bad.sum(axis=1).astype(np.int64)
        self._lps.append(lps)
        self._lens["n_logprobs"].append(n_lps)
        gaps, top_bad = self._gap_matrix([r.get("top_logprobs") for r in rows])
        self._gaps.append(gaps)
        self._unusable.append(unusable + top_bad)
        for key, values in zip(BATCH_OTHERS, batch_others([r.get("engine_batch_sizes") for r in rows]), strict=True):
            self._batch[key].append(values)

    def _flat_ids(self, seqs: list[Any], lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The chunk's token ids concatenated (``FastColumnBuilder``: each distinct list converted once)."""
        return flat_ints(seqs, lengths)

    def _logprob_matrix(self, seqs: list[list[Any] | None]) -> tuple[FloatMatrix, npt.NDArray[np.int64]]:
        """Chosen-token logprobs padded with NaN, and each record's count (``FastColumnBuilder``: one numpy call)."""
        return pad_float(seqs)

    def _gap_matrix(self, tops: list[Any]) -> tuple[FloatMatrix, npt.NDArray[np.int64]]:
        """Top-1 minus top-2 per position padded with NaN, and each record's unusable alternatives."""
        gaps: list[list[float | None] | None] = []
        bad = np.zeros(len(tops), dtype=np.int64)
        for i, t in enumerate(_list_or_none(top) for top in tops):
            if t is None:
                gaps.append(None)
                continue
            counted = [top_gap_counted(p) for p in t]
            gaps.append([g for g, _ in counted])
            bad[i] = sum(n for _, n in counted)
        return pad_float(gaps)[0], bad

    def _encode(self, seqs: list[list[str] | None]) -> IntMatrix:
        lengths = _lengths(seqs)
        self._lens["n_tokens"].append(lengths)
        mat: IntMatrix = pad_flat(self._token_codes(seqs), lengths, -1, np.int32)
        return mat

    def _token_codes(self, seqs: list[Any]) -> npt.NDArray[np.int32]:
        """The chunk's tokens concatenated as codes into the vocabulary, new strings coded in first-seen order
        (``FastColumnBuilder``: each distinct list coded once)."""
        flat = np.array(list(chain.from_iterable(s for s in seqs if s)), dtype=object)
        if not flat.size:
            return np.zeros(0, dtype=np.int32)
        local_codes, uniques = pd.factorize(flat)
        remap = np.array([self._vocab.setdefault(str(u), len(self._vocab)) for u in uniques], dtype=np.int32)
        codes: npt.NDArray[np.int32] = remap[local_codes]
        return codes

    def finish(self) -> CanaryColumns:
        """The columns. Call once: each scalar list is let go as soon as its column is made, and the frame takes
        the columns as they are (no copy into one block per type), so a million records' lists, their objects
        and the frame are not all held at once."""
        self._flush()
        unusable = np.concatenate(self._unusable) if self._unusable else np.zeros(0, np.int64)
        columns: dict[str, Any] = {}
        scalars, self._scalars = self._scalars, {}
        for col in list(scalars):
            values = pd.Series(scalars.pop(col), dtype=object)
            if col in _FLOAT_COLS:
                floats = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64, copy=True)
                infinite = np.isinf(floats)
                unusable += infinite
                floats[infinite] = np.nan
                columns[col] = floats
            elif col in _INT_COLS:
                columns[col] = pd.to_numeric(values, errors="coerce").fillna(-1).astype(np.int64).to_numpy()
            elif col == "burst":
                columns[col] = np.fromiter((v is True for v in values.tolist()), dtype=bool, count=len(values))
            elif col == "held_at_send":
                columns[col] = pd.array([v if isinstance(v, bool) else None for v in values.tolist()], dtype="boolean")
            else:
                columns[col] = values
        columns["unusable_numbers"] = unusable
        for col, parts in self._lens.items():
            columns[col] = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        for col, fparts in self._batch.items():
            columns[col] = np.concatenate(fparts) if fparts else np.zeros(0, np.float64)
        frame = pd.DataFrame(columns, copy=False)
        vocab = np.empty(len(self._vocab), dtype=object)
        vocab[:] = list(self._vocab)
        return CanaryColumns(
            frame=frame,
            token_ids=_widen(self._ids, -1) if self._ids else np.zeros((0, 0), np.int32),
            token_codes=_widen(self._codes, -1) if self._codes else np.zeros((0, 0), np.int32),
            vocab=vocab,
            logprobs=_widen(self._lps, np.nan) if self._lps else np.zeros((0, 0)),
            top_gap=_widen(self._gaps, np.nan) if self._gaps else np.zeros((0, 0)),
        )


def check_schema(raw: Mapping[str, Any], *, where: str) -> None:
    """A ``RunFolderError`` for a record of an unknown schema or without a required field."""
    if raw.get("schema") != SCHEMA:
        raise RunFolderError(
            f"{where}: canary record schema {shown(raw.get('schema'))} is not supported (expected {SCHEMA})"
        )
    missing = _REQUIRED - raw.keys()
    if missing:
        raise RunFolderError(f"{where}: canary record lacks required field(s) {sorted(missing)}")


def file_read(path: Path, records: int, skipped: list[int], malformed: dict[int, str]) -> FileRead:
    """What was read from one canary file; its tail is torn when its last line is unreadable and lacks
    its newline (a malformed record is a whole line)."""
    unreadable = [n for n in skipped if n not in malformed]
    return FileRead(path.name, records, len(skipped), skipped, _torn_tail(path, unreadable), malformed)


def batch_others(sizes: list[Any]) -> tuple[FloatMatrix, FloatMatrix, FloatMatrix]:
    """Per record, min / median / max of ``engine_batch_sizes`` minus 1 (the request itself): the other
    requests in its batch over its steps. NaN for a record without sizes (absent, null or empty).
    One flat array for the whole chunk; no Python work per value."""
    seqs = [s if isinstance(s, list) and s else None for s in sizes]
    lengths = _lengths(seqs)
    total = int(lengths.clip(0).sum())
    try:
        flat = np.fromiter(chain.from_iterable(s for s in seqs if s), dtype=np.float64, count=total)
    except (TypeError, ValueError):  # a null or a non-number inside a list: that value is dropped
        flat = np.fromiter((_num(v) for v in chain.from_iterable(s for s in seqs if s)), dtype=np.float64, count=total)
    lo, med, hi = segment_stats(flat, lengths)
    return lo - 1.0, med - 1.0, hi - 1.0


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else float("nan")


def _list_or_none(v: Any) -> list[Any] | None:
    """A sequence field as a list; anything else (a hand-edited scalar, an object) as missing."""
    return v if isinstance(v, list) else None
