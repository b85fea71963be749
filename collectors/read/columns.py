"""Canary records as columns: the column types, the number rules and the reference column builder.

Why: a run can hold a million canary records; building a million dataclasses and nested lists would
be slow and would not fit in memory, so each record is poured straight into numpy columns (padded
token matrices, chunk by chunk). ``CanaryRecord`` stays the one definition of the fields: required
keys and the schema number come from it. ``ColumnBuilder`` here is the reference definition of every
column; ``collectors.read.fastcolumns`` builds the same columns faster and is checked against it. The
padded matrices are made by ``collectors.read.matrices``; which records a column can hold, by
``collectors.read.recordcheck``.

Numbers no analysis can use: a logprob or an alternative's logprob that is null, not a number, NaN,
infinite or beyond ``MAX_ABS_LOGPROB`` (``±1.7e308`` would overflow every difference), and a time
that is not finite, become NaN (missing) and are counted per record in ``unusable_numbers``. A record
whose value no column can hold (``recordcheck.record_problem``: token ids that are not a list of integers 0 or
more, a canary id that is not a string, a level that is not a count, ...) is skipped, and its line and
the reason are kept in ``FileRead.malformed``: one odd record among thousands does not lose the run.
Raises ``RunFolderError`` (naming the file) for an unknown schema or a missing required field. Must
not print, and must not import Locust or anything under ``loadgen`` but errors.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pandas as pd  # type: ignore[import-untyped]

from collectors.jsonl import LINE_LIMIT, iter_numbered
from collectors.read.coresidency import segment_stats
from collectors.read.matrices import (
    FloatMatrix,
    IntMatrix,
    StoredFloats,
    _lengths,
    _num,
    _widen,
    flat_ints,
    narrow,
    pad_flat,
    pad_float,
    pad_ids,
)
from collectors.read.recordcheck import check_schema, record_problem
from loadgen.core.runfiles import open_regular
from loadgen.core.steptrace import renamed
from loadgen.core.wire.plausible import usage_problem

_CHUNK_ROWS = 2048
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
    "flush_tokens",
    "answer_id",
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
    "flush_tokens",
)
# Derived while reading from ``engine_batch_sizes`` (the engine's batch size at every step the request
# was in): the other requests it shared those steps with (size - 1). NaN where the record has none.
BATCH_OTHERS = ("batch_others_min", "batch_others_median", "batch_others_max")
_INT_COLS = ("level", "inflight_at_send")
# Beyond any real logprob (engines clamp a zero probability to about -1e4) and far from float overflow:
# a larger magnitude is a broken number, left out rather than allowed to swamp a drift or a chart.
MAX_ABS_LOGPROB = 1e6


@dataclass
class CanaryColumns:
    """Canary records as columns. Row i of every matrix is row i of ``frame``.

    Matrices are padded: ``-1`` past a row's length in the integer ones, NaN in the float ones; a row
    whose record lacked the sequence has length ``-1`` in ``frame`` (``n_ids``, ``n_tokens``,
    ``n_logprobs``). Widths may differ between matrices.
    """

    frame: Any  # pandas.DataFrame: SCALARS plus file, temperature, request_key, cached_tokens, n_ids, n_tokens,
    # n_logprobs, BATCH_OTHERS, unusable_numbers (values of the record left out as NaN: see the module doc),
    # ``answer_id`` only where the engine renamed the request (``loadgen.core.steptrace.renamed``),
    # usage_problem (what no engine could report in the record's usage, ``loadgen.core.wire.plausible``; or None).
    # ``burst`` is bool (False where absent), ``held_at_send`` pandas "boolean" (NA where absent),
    # ``background_held_at_send`` float (NaN where absent).
    token_ids: IntMatrix  # (n, w) int32 or int64
    token_codes: IntMatrix  # (n, w) int32 codes into ``vocab``
    vocab: npt.NDArray[np.object_]  # token strings
    logprobs: StoredFloats  # (n, w) chosen-token logprobs (float32 where exact: ``matrices.narrow``)
    top_gap: StoredFloats  # (n, w) top-1 minus top-2 logprob at each position (the same)

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
    """Accumulates canary records chunk by chunk into ``CanaryColumns``; also used for synthetic runs. A file's
    lines longer than ``line_limit`` are refused (``collectors.jsonl.bounded_lines``)."""

    def __init__(self, line_limit: int = LINE_LIMIT) -> None:
        self.line_limit = line_limit
        extra = ("file", "temperature", "request_key", "cached_tokens", "prompt_tokens", "usage_problem")
        self._scalars: dict[str, list[Any]] = {k: [] for k in (*SCALARS, *extra)}
        self._ids: list[IntMatrix] = []
        self._codes: list[IntMatrix] = []
        self._lps: list[StoredFloats] = []
        self._gaps: list[StoredFloats] = []
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
        for n, row in iter_numbered(path, skipped, limit=self.line_limit):
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
        answer_ids = self._scalars["answer_id"]
        answer_ids[-1] = renamed(answer_ids[-1], raw.get("request_id"))
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
        self._lps.append(narrow(lps))
        self._lens["n_logprobs"].append(n_lps)
        gaps, top_bad = self._gap_matrix([r.get("top_logprobs") for r in rows])
        self._gaps.append(narrow(gaps))
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


def _list_or_none(v: Any) -> list[Any] | None:
    """A sequence field as a list; anything else (a hand-edited scalar, an object) as missing."""
    return v if isinstance(v, list) else None
