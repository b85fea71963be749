"""Each canary joined to the engine steps that computed it: per output position, the step, its kind and size.

Why this module exists: on real engines the variable that decides whether a canary's logprobs move can be
the kind of step that computed a position (decode-only, or mixed with others' prefills), which no request
count shows (docs/design.md, "The engine step trace"). This module turns a ``collectors.read.steps.StepTable``
into per-step shapes and per-record step matrices; ``reports.analysis.attribution`` asks what they explain.

The rules, in one place: a row is a prefill row while ``computed < prompt``; a step with no prefill row is
decode-only, one of only prefill rows prefill-only, else mixed; the row whose ``computed + scheduled`` equals
``prompt + j`` computed output position ``j``, the last such row where a preemption computed it again.
Pure: arrays in, arrays out; it never reads a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from collectors.read.steps import StepTable
from loadgen.core.steptrace import record_key

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
DECODE_ONLY, MIXED, PREFILL_ONLY = 0, 1, 2
KIND_NAMES: Final = ("decode-only", "mixed", "prefill-only")
# what one request's row met in its step: its own kind (decode or prefill) and whether the step mixed kinds;
# GPU kernels pick their path by the batch, so a decode row beside others' prefills is computed another way
ROW_KIND_NAMES: Final = ("decode-only", "decode beside prefills", "prefill-only", "prefill beside decodes")


@dataclass(frozen=True)
class StepShapes:
    """Per step (indexed by ``StepTable.step``): requests in it, tokens it computed, its kind, its time."""

    requests: Ints
    tokens: Ints
    kind: npt.NDArray[np.int8]
    t: npt.NDArray[np.float64]


@dataclass(frozen=True)
class RecordSteps:
    """Per canary request (``records``: the first canary row of each request id that any step names) and output
    position: the global step that computed it (-1: no step in the trace did), and the request's own rows in that
    step (more than one: an ``n`` > 1 request, whose choices the engine schedules as one row each, all under its
    id). Per request: prefill steps of its prompt (more than one: the prompt was split into chunks), whether its
    first prefill found computed tokens (a prefix-cache hit), whether the engine preempted it. ``rows``: per canary
    row, its request's index here or -1 (the choice records of one request share it)."""

    records: Ints
    step: Ints  # (len(records), width)
    prefill: Bools  # (len(records), width): the row that computed the position was a prefill row
    own: Ints  # (len(records), width): the record's rows in that step (1; n for an n > 1 request's choices)
    chunks: Ints
    cache_hit: Bools
    preempted: Bools
    rows: Ints


def step_shapes(table: StepTable) -> StepShapes:
    n = int(table.step.max()) + 1 if table.rows else 0
    requests = np.bincount(table.step, minlength=n).astype(np.int64)
    tokens = np.bincount(table.step, weights=table.scheduled, minlength=n).astype(np.int64)
    prefill = np.bincount(table.step, weights=table.computed < table.prompt, minlength=n).astype(np.int64)
    kind = np.where(prefill == 0, DECODE_ONLY, np.where(prefill == requests, PREFILL_ONLY, MIXED)).astype(np.int8)
    t = np.zeros(n, np.float64)
    t[table.step] = table.t
    return StepShapes(requests, tokens, kind, t)


def trace_keys(
    table: StepTable, request_ids: npt.NDArray[np.object_], answer_ids: npt.NDArray[np.object_]
) -> npt.NDArray[np.object_]:
    """Each canary row's name in the trace: its ``request_id`` where some step names it, else the key inside the
    answer's own id (a router in front sent the engine a request id of its own: vllm-router does, and the answer
    comes back under it), else its ``request_id`` still (docs/design.md, "Joining ids")."""
    named = set(table.key.tolist())
    out = request_ids.copy()
    for i, (rid, aid) in enumerate(zip(request_ids.tolist(), answer_ids.tolist(), strict=True)):
        if rid not in named and isinstance(aid, str) and (key := record_key(aid)) is not None and key in named:
            out[i] = key
    return out


def join(table: StepTable, request_ids: npt.NDArray[np.object_], width: int) -> RecordSteps:
    """The steps of each canary record in ``request_ids`` (the canary rows' names in the trace: ``trace_keys``),
    positions below ``width``. A trace row whose key names no record (background, another run) is left out."""
    index: dict[object, int] = {}
    for i, rid in enumerate(request_ids.tolist()):
        index.setdefault(rid, i)  # an n > 1 request's choice records share its id: its first row stands for all
    rec = np.fromiter((index.get(k, -1) for k in table.key.tolist()), np.int64, count=table.rows)
    named = rec >= 0
    records = np.unique(rec[named])
    local = np.full(len(request_ids), -1, np.int64)
    local[records] = np.arange(len(records), dtype=np.int64)
    n = len(records)
    r = local[rec[named]]
    st = table.step[named]
    sched, comp, prompt = table.scheduled[named], table.computed[named], table.prompt[named]
    j = comp + sched - prompt
    # the record's rows in each row's step: an n > 1 request's choices share its key, one row each
    pair = r * (int(st.max()) + 1 if len(st) else 1) + st
    _, pair_at, pair_rows = np.unique(pair, return_inverse=True, return_counts=True)
    rows_in_step = pair_rows[pair_at].astype(np.int64)
    out = np.full(n * width, -1, np.int64)
    own = np.zeros(n * width, np.int64)
    row_prefill = np.zeros(n * width, bool)
    is_prefill = comp < prompt
    keep = (j >= 0) & (j < width)
    flat = r[keep] * width + j[keep]
    order = np.lexsort((st[keep], flat))  # by position, then step: the last step of a position wins
    flat_s, st_s = flat[order], st[keep][order]
    last = np.r_[flat_s[1:] != flat_s[:-1], True] if len(flat_s) else np.zeros(0, bool)
    out[flat_s[last]] = st_s[last]
    row_prefill[flat_s[last]] = is_prefill[keep][order][last]
    own[flat_s[last]] = rows_in_step[keep][order][last]
    chunks = np.bincount(r[is_prefill], minlength=n).astype(np.int64)
    first = np.lexsort((st, r))  # each record's rows in step order
    head = first[np.r_[True, r[first][1:] != r[first][:-1]]] if len(first) else first
    cache_hit = np.zeros(n, bool)
    cache_hit[r[head]] = (comp[head] > 0) & is_prefill[head]
    preempted = np.isin(request_ids[records], np.asarray(sorted(table.preempted), dtype=object))
    rows = local[np.fromiter((index[rid] for rid in request_ids.tolist()), np.int64, count=len(request_ids))]
    return RecordSteps(
        records,
        out.reshape(n, width),
        row_prefill.reshape(n, width),
        own.reshape(n, width),
        chunks,
        cache_hit,
        preempted,
        rows,
    )


def others_per_record(rs: RecordSteps, shapes: StepShapes) -> tuple[Ints, npt.NDArray[np.float64], Ints]:
    """Per joined record, the other requests in the steps that computed its outputs: min, median, max (-1 /
    NaN where none is known). The engine trace's co-residency: what each canary shared, step by step. An n > 1
    request's own choices are not others: its level is the load around it, as for any canary."""
    n = len(rs.records)
    lo = np.full(n, -1, np.int64)
    hi = np.full(n, -1, np.int64)
    med = np.full(n, np.nan)
    if n == 0 or len(shapes.requests) == 0:
        return lo, med, hi
    known = rs.step >= 0
    others = np.where(known, shapes.requests[np.where(known, rs.step, 0)] - rs.own, -1).astype(np.float64)
    masked = np.where(known, others, np.nan)
    has = known.any(axis=1)
    if has.any():
        lo[has] = np.nanmin(masked[has], axis=1).astype(np.int64)
        hi[has] = np.nanmax(masked[has], axis=1).astype(np.int64)
        med[has] = np.nanmedian(masked[has], axis=1)
    return lo, med, hi


@dataclass(frozen=True)
class TraceJoin:
    """A run's step trace met with its canary records once: what the co-residency and the attribution share."""

    table: StepTable
    records: RecordSteps
    shapes: StepShapes

    @property
    def source(self) -> str:
        return ", ".join(sorted({f.source for f in self.table.files if f.source})) or "unknown"

    def others(self, n_rows: int) -> tuple[npt.NDArray[np.float64], ...]:
        """Per canary row (``n_rows``), the others in the steps that computed it: min, median, max; NaN where the
        trace names no step of the row."""
        lo, med, hi = others_per_record(self.records, self.shapes)
        at = self.records.rows[:n_rows]
        joined = at >= 0
        out = []
        for values in (lo.astype(np.float64), med, hi.astype(np.float64)):
            full = np.full(n_rows, np.nan)
            full[joined] = np.where(np.isnan(med), np.nan, values)[at[joined]]
            out.append(full)
        return tuple(out)


def trace_join(table: StepTable, request_ids: npt.NDArray[np.object_], width: int) -> TraceJoin:
    return TraceJoin(table, join(table, request_ids, width), step_shapes(table))
