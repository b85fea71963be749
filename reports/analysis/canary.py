"""Per-canary analysis: reference, per-level and overall figures, forks. The heart of ``report.json``.

Pure: columns in, the typed pieces of ``reports.model.report`` out (a ``CanaryAnalysis`` per canary); no I/O,
no printing. Rows are first put in a canonical order (send time, then request id) so that the order
records were written in changes no figure, including tie-breaks ("earliest first") and floating-point
sums.

Why this length: every figure of a canary (levels, overall, forks, reference, co-residency groups, sides)
comes from one canonical row order and one ``CanaryView``; split, each part would rebuild or pass that view,
and the order that keeps figures independent of write order would live in several places.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd  # type: ignore[import-untyped]

from collectors.read.matrices import StoredFloats
from collectors.read.runfolder import CanaryColumns
from loadgen.core.claims import DEFAULT_MAX_RATE, Claim, level_claim
from loadgen.core.identity import reference_index
from loadgen.core.servers import SIDES, Side
from loadgen.core.stats import histogram, median, num, quantiles, ratio, wilson
from reports.analysis import coresidency, forks, heatmap, provenance, side_rule, sides
from reports.analysis import identity as ident
from reports.analysis.attribution import Compared, attribute
from reports.analysis.kernels import Rows, drift, first_drift, group_rows
from reports.analysis.steps import TraceJoin
from reports.model.coresidency import CoResidencyGroup, Sides
from reports.model.engine_steps import EngineSteps
from reports.model.report import (
    CanaryAnalysis,
    CanaryFigures,
    DriftHeatmap,
    Figures,
    FirstDivergence,
    Fork,
    ForkGaps,
    Latency,
    Level,
    Overall,
    Reference,
)


def canonical_order(cols: CanaryColumns, rows: Rows) -> Rows:
    """``rows`` sorted by send time, ties broken by request id."""
    sent = cols.frame["sent_at"].to_numpy()[rows]
    order = np.argsort(sent, kind="stable")
    s = sent[order]
    if len(s) > 1 and bool(np.any(s[1:] == s[:-1])):
        rid = cols.frame["request_id"].to_numpy()[rows].astype(str)
        order = np.lexsort((rid, sent))
    return rows[order]


@dataclass(frozen=True)
class ClaimRule:
    """How each level's ``claim`` is judged (``loadgen.core.claims.level_claim``): "divergence rate <
    ``max_rate`` at 95%", ``asked`` for by the run or not (then at ``DEFAULT_MAX_RATE``, to say what a
    claim would need), against ``planned`` canaries per level; ``ended_early``: the levels the claim rule
    ended before their quota."""

    max_rate: float = DEFAULT_MAX_RATE
    asked: bool = False
    planned: int | None = None
    ended_early: frozenset[int] = field(default_factory=frozenset)

    def judge(self, figures: Figures, level: int) -> Claim:
        return level_claim(
            figures["diverged"],
            figures["completions"],
            self.max_rate,
            asked=self.asked,
            planned=self.planned,
            ended_early=level in self.ended_early,
        )


class CanaryView:
    """Per-row arrays of one canary, aligned with ``rows`` (canonical order)."""

    ref_kind: Literal["baseline", "modal"]  # set with the reference

    def __init__(self, cols: CanaryColumns, rows: Rows, loaded: Side | None = None) -> None:
        f = cols.frame
        self.cols, self.rows = cols, rows
        self.phase = f["phase"].to_numpy()[rows]
        self.ok = f["status"].to_numpy()[rows] == "ok"
        self.level = f["level"].to_numpy()[rows]
        self.inflight = f["inflight_at_send"].to_numpy()[rows].astype(np.float64)
        self.engine = f["engine_running"].to_numpy()[rows]
        self.latency = f["latency_s"].to_numpy()[rows]
        self.error_kind = f["error_kind"].to_numpy()[rows]
        self.co = coresidency.measure(f, rows)
        self.loaded = loaded  # a prefill/decode run: the side its background loads; each side measured apart
        self.sides = (
            {s: coresidency.measure(f, rows, scraped_columns=sides.OTHERS[s], promised=s == loaded) for s in SIDES}
            if loaded is not None and sides.WINDOW_KNOWN in f
            else None
        )
        self.window_known = f[sides.WINDOW_KNOWN].to_numpy(dtype=bool)[rows] if self.sides else None
        self.comp = self.ok & (self.phase != "warmup")
        comp_rows = rows[self.comp]
        self.identity = ident.choose(cols, comp_rows)
        labels, firsts = group_rows(self.identity.mat, self.identity.mrows)
        n = len(rows)
        self.label = np.full(n, -1, np.int64)
        self.label[self.comp] = labels
        self.firsts = np.flatnonzero(self.comp)[firsts]  # first row (index into rows) of each label
        self.length = np.full(n, -1, np.int64)
        self.length[self.comp] = self.identity.lengths
        self.mrow = np.full(n, -1, np.int64)
        self.mrow[self.comp] = self.identity.mrows
        self.ref = self._reference()
        self.fd = np.full(n, -1, np.int64)
        nanf = np.full(n, np.nan)
        self.dmax, self.dmean, self.dbit = nanf, nanf.copy(), nanf.copy()
        self.cmp_len = np.full(n, -1, np.int64)  # positions compared for drift (before the first divergence)
        self.dpos = np.zeros(n, np.int64)  # of those, the positions where both logprobs exist: what drift measured
        self.fdrift = np.full(n, -1, np.int64)  # first position whose logprob was not bitwise the reference's
        self.fclass = np.full(n, -1, np.int8)  # fork class of a divergent completion (reports.analysis.forks)
        self.fstep, self.fsteps = nanf.copy(), nanf.copy()  # its estimated rounding step, its gap in steps
        if self.ref is not None:
            refvec = self.identity.mat[self.mrow[self.ref]]
            self.fd[self.comp] = ident.first_divergence_rows(self.identity.mat, self.identity.mrows, refvec)
            self._drift()
            self._classify()

    def _reference(self) -> int | None:
        base = self.comp & (self.phase == "baseline")
        pool = base if base.any() else self.comp & (self.phase == "sweep")
        self.ref_kind = "baseline" if base.any() else "modal"
        self.ref_pool = pool
        pool_idx = np.flatnonzero(pool)  # canonical order: the order they were sent
        at = reference_index(self.label[pool_idx].tolist())  # the live table's rule too
        return None if at is None else int(pool_idx[at])

    def _drift(self) -> None:
        if self.identity.kind == "text" or self.ref is None:
            return
        lp = self.cols.logprobs
        ref_lp = lp[self.rows[self.ref]] if lp.shape[1] else np.zeros(0)
        if lp.shape[1] == 0 or bool(np.isnan(ref_lp).all()):
            return
        comp = np.flatnonzero(self.comp)
        ref_len = self.length[self.ref]
        cmp_len = np.where(self.fd[comp] >= 0, self.fd[comp], ref_len)
        self.cmp_len[comp] = cmp_len
        got = drift(lp, self.rows[comp], ref_lp, cmp_len)
        self.dmax[comp], self.dmean[comp], self.dbit[comp], self.dpos[comp] = got
        self.fdrift[comp] = first_drift(lp, self.rows[comp], ref_lp, cmp_len)

    def _classify(self) -> None:
        """Each divergent completion's fork class, from the reference's top-1 − top-2 gap and chosen-token
        logprob at its first divergence (``reports.analysis.forks``). Text identity counts characters, not tokens:
        its forks stay unclassified."""
        div = np.flatnonzero(self.comp & (self.fd >= 0))
        if self.ref is None or len(div) == 0:
            return
        pos = self.fd[div]
        ref_row = int(self.rows[self.ref])
        tokens = self.identity.kind != "text"
        gap = _at(self.cols.top_gap, ref_row, pos) if tokens else np.full(len(pos), np.nan)
        top1 = _at(self.cols.logprobs, ref_row, pos) if tokens else np.full(len(pos), np.nan)
        self.fclass[div], self.fstep[div], self.fsteps[div] = forks.classify(top1, gap)


def _at(mat: StoredFloats, row: int, pos: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """``mat[row, pos]``, NaN for a position past the matrix's width."""
    out = np.full(len(pos), np.nan)
    inside = pos < mat.shape[1]
    out[inside] = mat[row, pos[inside]]
    return out


def latency(values: npt.NDArray[np.float64]) -> Latency | None:
    """p50, p90, p99, max and count of the finite values (``loadgen.core.stats.quantiles``)."""
    q = quantiles(values)
    return None if q is None else {"p50": q["p50"], "p90": q["p90"], "p99": q["p99"], "max": q["max"], "n": q["n"]}


def first_divergence(fds: npt.NDArray[np.int64]) -> FirstDivergence | None:
    """min, median, max and the exact histogram of first-divergence positions; None without any."""
    if fds.size == 0:
        return None
    return {"min": int(fds.min()), "median": float(np.median(fds)), "max": int(fds.max()), "histogram": histogram(fds)}


def summarise(c: CanaryView, sel: npt.NDArray[np.bool_]) -> Figures:
    """Figures for the selected rows (a level, or the whole sweep)."""
    comp = sel & c.comp
    n_comp = int(comp.sum())
    labels = c.label[comp]
    counts = np.bincount(labels) if n_comp else np.zeros(0, np.int64)
    div = comp & (c.fd >= 0)
    k = int(div.sum())
    fds = c.fd[div]
    ci = wilson(k, n_comp)
    ref_label = c.label[c.ref] if c.ref is not None else -1
    has_drift = comp & ~np.isnan(c.dmax)
    kinds = c.error_kind[sel & ~c.ok]
    err_kinds: dict[str, int] = {}
    for kind in kinds:
        err_kinds[str(kind)] = err_kinds.get(str(kind), 0) + 1
    out: Figures = {
        "canaries": int(sel.sum()),
        "errors": int((sel & ~c.ok).sum()),
        "error_kinds": dict(sorted(err_kinds.items())),
        "completions": n_comp,
        "unique_completions": int((counts > 0).sum()),
        "diverged": k if c.ref is not None else None,
        "divergence_rate": ratio(k, n_comp) if c.ref is not None else None,
        "divergence_rate_ci95": list(ci) if ci is not None and c.ref is not None else None,
        "modal_share": ratio(int(counts.max()), n_comp) if n_comp else None,
        "reference_share": ratio(int((labels == ref_label).sum()), n_comp) if c.ref is not None else None,
        "earliest_divergence": int(fds.min()) if k else None,
        "first_divergence": first_divergence(fds),
        "fork_classes": forks.counts(c.fclass[div]) if c.ref is not None else None,
        "logprob_drift": None
        if not has_drift.any()
        else {
            "max": float(np.max(c.dmax[has_drift])),
            "mean": float(np.mean(c.dmean[has_drift])),
            "bitwise_equal_share": float(np.mean(c.dbit[has_drift])),
            "compared": int(has_drift.sum()),
            "positions": int(c.dpos[has_drift].sum()),
        },
        "observed_inflight": {"median": median(c.inflight[sel])},
        "engine_running": None if median(c.engine[sel]) is None else {"median": median(c.engine[sel])},
        "latency_s": latency(c.latency[sel & c.ok]),
        "co_residency": coresidency.level_block(c.co, sel),
    }
    if c.sides:
        out["co_residency_sides"] = {
            "prefill": coresidency.level_block(c.sides["prefill"], sel),
            "decode": coresidency.level_block(c.sides["decode"], sel),
        }
    return out


def _forks(c: CanaryView) -> list[Fork]:
    div = np.flatnonzero(c.comp & (c.phase == "sweep") & (c.fd >= 0))
    if c.ref is None or len(div) == 0:
        return []
    mat, ref_m = c.identity.mat, c.mrow[c.ref]
    pos = c.fd[div]
    other = np.where(pos < mat.shape[1], mat[c.mrow[div], np.minimum(pos, mat.shape[1] - 1)], -1)
    keys, inverse, counts = np.unique(np.stack([pos, other], axis=1), axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.ravel()
    order = np.argsort(inverse, kind="stable")  # members of each fork, in canonical row order
    bounds = np.concatenate([[0], np.cumsum(counts)])
    gap = c.cols.top_gap
    ref_row = int(c.rows[c.ref])
    out: list[Fork] = []
    for g, (p, _) in enumerate(keys.tolist()):
        members = div[order[bounds[g] : bounds[g + 1]]]
        first = int(members[0])
        levels, per = np.unique(c.level[members], return_counts=True)
        g_val = gap[ref_row, p] if p < gap.shape[1] else np.nan
        out.append(
            {
                "position": int(p),
                "reference_token": ident.display(c.cols, c.identity, ref_row, int(ref_m), int(p)),
                "other_token": ident.display(c.cols, c.identity, int(c.rows[first]), int(c.mrow[first]), int(p)),
                "reference_token_id": ident.id_at(c.identity, int(ref_m), int(p)),
                "other_token_id": ident.id_at(c.identity, int(c.mrow[first]), int(p)),
                "count": len(members),
                "levels": {str(lv): int(n) for lv, n in zip(levels.tolist(), per.tolist(), strict=True)},
                "first_seen_concurrency": int(levels.min()),
                "top1_top2_gap": num(g_val),
                "class": forks.label(int(c.fclass[first])),
                "rounding_step": num(c.fstep[first]),
                "gap_steps": num(c.fsteps[first]),
            }
        )
    out.sort(key=lambda f: (f["position"], -f["count"], str(f["other_token"])))
    return out


def _reference_block(c: CanaryView, max_tokens: int = 2048) -> Reference:
    pool = c.ref_pool
    base = c.phase == "baseline"
    scope = base if c.ref_kind == "baseline" else (c.phase == "sweep")
    block: Reference = {
        "kind": c.ref_kind,
        "identity": c.identity.kind,
        "unit": c.identity.unit,
        "identity_available": c.identity.available,
        "identity_note": ident.note(c.identity),
        "canaries": int(scope.sum()),
        "errors": int((scope & ~c.ok).sum()),
        "completions": int(pool.sum()),
        "unique_completions": len(np.unique(c.label[pool])),
        "self_consistent": None,
        "request_id": None,
        "length": None,
        "text": None,
        "tokens": [],
        "earliest_divergence": None,
    }
    if c.ref is None:
        return block
    ref_row, ref_m = int(c.rows[c.ref]), int(c.mrow[c.ref])
    length = int(c.length[c.ref])
    pool_fd = c.fd[pool]
    block.update(
        {
            "self_consistent": bool(block["unique_completions"] == 1) if c.ref_kind == "baseline" else None,
            "request_id": str(c.cols.frame["request_id"].iloc[ref_row]),
            "length": length,
            "text": c.cols.frame["text"].iloc[ref_row],
            "tokens": [ident.display(c.cols, c.identity, ref_row, ref_m, p) for p in range(min(length, max_tokens))],
            "earliest_divergence": int(pool_fd[pool_fd >= 0].min()) if bool((pool_fd >= 0).any()) else None,
        }
    )
    return block


def level_figures(c: CanaryView, sweep: npt.NDArray[np.bool_], level: int, rule: ClaimRule) -> Level:
    figures = summarise(c, sweep & (c.level == level))
    # not_measured: set by reports.analysis.build, which knows the run's background (reports.analysis.level_load)
    return {"concurrency": level, **figures, "claim": rule.judge(figures, level), "not_measured": None}


def analyse_canary(
    cols: CanaryColumns,
    rows: Rows,
    levels: list[int] | None = None,
    rule: ClaimRule = ClaimRule(),
    loaded: Side | None = None,
    trace: TraceJoin | None = None,
    kv: provenance.ProvenanceRows | None = None,
) -> CanaryFigures:
    """Everything ``report.json`` says about one canary (its rows of ``cols``, any order); ``loaded``: the side a
    prefill/decode run's background loads (its frame joined by ``reports.analysis.sides.join_sides``); ``kv``:
    where each row's KV came from (``reports.analysis.provenance``)."""
    c = CanaryView(cols, canonical_order(cols, rows), loaded)
    sweep = c.phase == "sweep"
    all_levels = sorted(set(c.level[sweep].tolist()) | set(levels or []))
    per_level = [level_figures(c, sweep, int(lv), rule) for lv in all_levels]
    diverged_levels = [lv["concurrency"] for lv in per_level if lv["diverged"]]
    overall: Overall = {
        **summarise(c, sweep),
        "first_divergent_concurrency": min(diverged_levels) if diverged_levels else None,
    }
    out: CanaryFigures = {
        "reference": _reference_block(c),
        "overall": overall,
        "levels": per_level,
        "forks": _forks(c),
        "fork_gaps": fork_gaps(c, sweep),
        "drift_heatmap": drift_heatmap(c, sweep, all_levels),
        "by_co_residency": by_co_residency(c, sweep),
    }
    if c.sides:
        out["sides"] = sides_section(c, sweep)
    if trace is not None:
        out["engine_steps"] = engine_steps(c, trace)
    if kv is not None:
        block = provenance.section(kv, c.rows, c.comp, c.fd, c.dmax, referred=c.ref is not None, frame=cols.frame)
        if block is not None:
            out["provenance"] = block
    return out


def engine_steps(c: CanaryView, trace: TraceJoin) -> EngineSteps:
    """The attribution of this canary's drift to its engine steps (``reports.analysis.attribution``). A greedy
    flip with no earlier bitwise move is its own first drift: the logits moved there."""
    comp = np.flatnonzero(c.comp) if c.ref is not None else np.zeros(0, np.int64)
    fd = c.fd[comp]
    moved = np.where((c.fdrift[comp] < 0) & (fd >= 0), fd, c.fdrift[comp])
    compared = np.where(c.cmp_len[comp] >= 0, c.cmp_len[comp], np.where(fd >= 0, fd, c.length[comp]))
    rows = c.rows[comp]
    compared_records = Compared(
        rows=rows,
        request_id=c.cols.frame["request_id"].to_numpy(dtype=object)[rows],
        level=c.level[comp].astype(np.int64),
        first_drift=moved,
        first_flip=fd,
        compared=compared,
    )
    return attribute(compared_records, trace.records, trace.shapes, c.cols.n, trace.source)


def fork_gaps(c: CanaryView, sweep: npt.NDArray[np.bool_]) -> ForkGaps:
    """How forks were classified (``reports.analysis.forks.method``) and the distribution of the sweep's divergent
    completions' gaps in rounding steps."""
    div = sweep & c.comp & (c.fd >= 0)
    return {**forks.method(), "histogram": forks.gap_histogram(c.fsteps[div])}


def drift_heatmap(c: CanaryView, sweep: npt.NDArray[np.bool_], levels: list[int]) -> DriftHeatmap | None:
    """Logprob drift by position × level over the sweep's completions (``reports.analysis.heatmap``)."""
    lp = c.cols.logprobs
    if c.ref is None or lp.shape[1] == 0 or c.identity.kind == "text":
        return None
    sel = np.flatnonzero(sweep & c.comp & (c.cmp_len >= 0))
    ref_lp = lp[c.rows[c.ref]]
    return heatmap.drift_by_position(lp, c.rows[sel], ref_lp, c.cmp_len[sel], c.level[sel], levels)


def by_co_residency(
    c: CanaryView, sweep: npt.NDArray[np.bool_], m: coresidency.Measured | None = None
) -> list[CoResidencyGroup] | None:
    """Sweep canaries grouped by their measured co-residency (the other requests the engine really ran
    beside them, per-canary median rounded to an integer; ``m``: one side's, else the canary's), with the
    same figures as a level, computed by ``summarise``; None when no canary was measured."""
    m = c.co if m is None else m
    known, group = coresidency.others_group(m, sweep)
    if not known.any():
        return None
    out: list[CoResidencyGroup] = []
    for n in np.unique(group[known]).tolist():
        sel = known & (group == n)
        fig = summarise(c, sel)
        out.append(
            {
                "others": int(n),
                "canaries": fig["canaries"],
                "completions": fig["completions"],
                "unique_completions": fig["unique_completions"],
                "diverged": fig["diverged"],
                "divergence_rate": fig["divergence_rate"],
                "divergence_rate_ci95": fig["divergence_rate_ci95"],
                "earliest_divergence": fig["earliest_divergence"],
                "min": coresidency.whole(m.lo[sel].min()),
                "max": coresidency.whole(m.hi[sel].max()),
            }
        )
    return out


def sides_section(c: CanaryView, sweep: npt.NDArray[np.bool_]) -> Sides:
    """A prefill/decode run's divergence by each side's load: a table per side (``by_co_residency`` over that
    side's figure), the heatmap of one against the other (``reports.analysis.sides.heatmap``) and which side's load the
    divergence follows (``reports.analysis.side_rule``), over the sweep's completions."""
    assert c.sides is not None and c.loaded is not None and c.window_known is not None
    groups = {s: coresidency.others_group(c.sides[s], sweep)[1] for s in SIDES}
    comp = sweep & c.comp
    diverged = c.fd >= 0
    follows = None
    if c.ref is not None:
        follows = side_rule.follows({s: c.sides[s].med[comp] for s in SIDES}, diverged[comp])
    return {
        "loaded": c.loaded,
        "prefill_window_unknown": int((sweep & ~c.window_known).sum()),
        "prefill": by_co_residency(c, sweep, c.sides["prefill"]),
        "decode": by_co_residency(c, sweep, c.sides["decode"]),
        "heatmap": sides.heatmap(groups["prefill"][comp], groups["decode"][comp], diverged[comp])
        if c.ref is not None
        else None,
        "follows": follows,
    }


def analyse(
    cols: CanaryColumns,
    levels: list[int] | None = None,
    rule: ClaimRule = ClaimRule(),
    loaded: Side | None = None,
    trace: TraceJoin | None = None,
    kv: provenance.ProvenanceRows | None = None,
) -> list[CanaryAnalysis]:
    """One entry per canary id, sorted by id: ``{"id", "reference", "overall", "levels", "forks", ...}``."""
    codes, uniq = pd.factorize(cols.frame["canary_id"].astype(str), sort=True)
    if len(uniq) == 1:
        every = np.arange(len(codes), dtype=np.int64)
        return [{"id": str(uniq[0]), **analyse_canary(cols, every, levels, rule, loaded, trace, kv)}]
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(uniq) + 1))
    return [
        {
            "id": str(cid),
            **analyse_canary(cols, order[bounds[i] : bounds[i + 1]].astype(np.int64), levels, rule, loaded, trace, kv),
        }
        for i, cid in enumerate(uniq)
    ]
