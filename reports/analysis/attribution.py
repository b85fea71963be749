"""Why a canary drifted: what the engine steps that computed its first moved position held, against the rest.

Why this module exists: a report that says "diverged at token 44 beside 7 others" leaves the engineer to
guess the cause. With an engine step trace joined to every canary (``reports.analysis.steps``), each
position a record computed before or at its first drift is a trial: did the logprobs first move here? Grouped
by a factor of the step (its kind, the others in it, its tokens) or of the record (its prompt split into
chunks, a prefix-cache hit, a preemption), the first drifts either fall only under some values of a factor
or they do not. The sentence names the factor that separates drifted from undrifted positions, with Wilson
intervals, or says that none does (docs/design.md, "The engine step trace").

Pure: arrays in, the report's ``engine_steps`` block out. It decides nothing about identity or reference
(``reports.analysis.canary`` gives it each record's first drift and first flip).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from loadgen.core.stats import wilson
from reports.analysis.steps import KIND_NAMES, MIXED, ROW_KIND_NAMES, RecordSteps, StepShapes
from reports.model.engine_steps import EngineSteps, Factor, FactorRow, RecordDrift, StepAt

Ints = npt.NDArray[np.int64]
LISTED_MAX: Final = 200
OTHERS_EDGES: Final = (0, 1, 4, 16, 64)  # buckets: 0, 1-3, 4-15, 16-63, 64+
TOKENS_EDGES: Final = (1, 2, 16, 256, 2048)  # buckets: 1, 2-15, 16-255, 256-2047, 2048+


@dataclass(frozen=True)
class Compared:
    """The canary's compared records (ok, not warm-up, with a reference), in send order: their canary-row
    index, request id, level, first drift (-1: none; a greedy flip with no earlier bitwise move is its own
    drift), first flip (-1: none) and positions compared (the positions a drift could have been seen at)."""

    rows: Ints
    request_id: npt.NDArray[np.object_]
    level: Ints
    first_drift: Ints
    first_flip: Ints
    compared: Ints


def _bucket_names(edges: tuple[int, ...]) -> list[str]:
    names = []
    for i, lo in enumerate(edges):
        hi = edges[i + 1] - 1 if i + 1 < len(edges) else None
        names.append(str(lo) if hi == lo else f"{lo}-{hi}" if hi is not None else f"{lo}+")
    return names


def _bucket(values: Ints, edges: tuple[int, ...]) -> Ints:
    return (np.searchsorted(np.asarray(edges), values, side="right") - 1).clip(0).astype(np.int64)


def _rows(codes: Ints, events: npt.NDArray[np.bool_], names: list[str]) -> list[FactorRow]:
    n = np.bincount(codes, minlength=len(names))
    k = np.bincount(codes[events], minlength=len(names))
    out: list[FactorRow] = []
    for name, positions, drifts in zip(names, n.tolist(), k.tolist(), strict=True):
        if positions == 0:
            continue
        low_high = wilson(drifts, positions)
        out.append(
            {
                "value": name,
                "positions": positions,
                "drifts": drifts,
                "rate": drifts / positions,
                "low": low_high[0] if low_high else None,
                "high": low_high[1] if low_high else None,
            }
        )
    return out


def _separation(rows: list[FactorRow]) -> tuple[bool, float]:
    """Whether the drifts fall only under some values and their pooled interval lies above the rest's; the
    pooled rate under those values (how sure a cause it is)."""
    inside = [r for r in rows if r["drifts"] > 0]
    outside = [r for r in rows if r["drifts"] == 0]
    if not inside or not outside:
        return False, 0.0
    k, n = sum(r["drifts"] for r in inside), sum(r["positions"] for r in inside)
    n_out = sum(r["positions"] for r in outside)
    hi_out = wilson(0, n_out)
    lo_in = wilson(k, n)
    return bool(hi_out and lo_in and hi_out[1] < lo_in[0]), k / n


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:.3g}%"


_KINDS: Final = {
    "decode-only": "decode-only steps",
    "decode beside prefills": "steps that mixed its decode with others' prefills",
    "prefill-only": "prefill-only steps",
    "prefill beside decodes": "steps that mixed its prefill with others' decodes",
}
_FLAGS: Final = {
    "prompt split into chunks": ("records whose prompt was split", "unsplit prompts"),
    "prefix-cache hit": ("records with a prefix-cache hit", "records without one"),
    "preempted": ("preempted records", "records never preempted"),
}


def _either(values: list[str]) -> str:
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


def _phrase(factor: str, values: list[str]) -> str:
    """Where positions were computed, in words: ``values`` of ``factor`` ("steps with 1-3 or 4-15 other requests")."""
    if factor == "step kind":
        return _either([_KINDS.get(v, v) for v in values])
    if factor == "others in the step":
        return f"steps with {_either(values)} other requests"
    if factor == "tokens in the step":
        return f"steps of {_either(values)} tokens"
    yes, no = _FLAGS[factor]
    return _either([yes if v == "yes" else no for v in values])


def _sentence(factors: list[Factor], drifted: int, joined: int) -> str:
    if joined == 0:
        return "The engine trace holds no step of this canary's compared records: nothing to attribute."
    if drifted == 0:
        return (
            f"None of the {joined} records joined to the engine trace drifted from the reference: nothing to attribute."
        )
    best: tuple[float, Factor] | None = None
    for f in factors:
        ok, rate = _separation(f["rows"])
        if ok and (best is None or rate > best[0]):
            best = (rate, f)
    if best is not None:
        f = best[1]
        inside = [r for r in f["rows"] if r["drifts"] > 0]
        outside = [r for r in f["rows"] if r["drifts"] == 0]
        k, n = sum(r["drifts"] for r in inside), sum(r["positions"] for r in inside)
        n_out = sum(r["positions"] for r in outside)
        lo_in, hi_out = wilson(k, n), wilson(0, n_out)
        where = _phrase(f["factor"], [r["value"] for r in inside])
        rest = _phrase(f["factor"], [r["value"] for r in outside])
        return (
            f"Drift followed the {f['factor']}: all {k} first drifts were at positions computed in {where} "
            f"({k} of {n} positions, {_pct(k / n)} [{_pct(lo_in[0] if lo_in else None)}-"
            f"{_pct(lo_in[1] if lo_in else None)}]), none at the {n_out} positions in {rest} "
            f"(0 [0-{_pct(hi_out[1] if hi_out else None)}])."
        )
    kind = next((f for f in factors if f["factor"] == "step kind"), None)
    detail = (
        "; by step kind: " + ", ".join(f"{r['value']} {r['drifts']} of {r['positions']}" for r in kind["rows"])
        if kind
        else ""
    )
    return f"No single factor separates drifted from undrifted positions{detail}."


def _step_at(step: int, prefill: bool, shapes: StepShapes) -> StepAt | None:
    if step < 0:
        return None
    return {
        "row": "prefill" if prefill else "decode",
        "kind": KIND_NAMES[int(shapes.kind[step])],
        "requests": int(shapes.requests[step]),
        "tokens": int(shapes.tokens[step]),
    }


def attribute(c: Compared, rs: RecordSteps, shapes: StepShapes, n_rows: int, source: str) -> EngineSteps:
    """The ``engine_steps`` block of one canary: its compared records ``c`` joined through ``rs`` (built over
    ``n_rows`` canary rows) to the steps ``shapes`` describes."""
    loc = rs.rows[:n_rows][c.rows]
    joined = loc >= 0
    mat = rs.step[loc[joined]] if joined.any() else np.zeros((0, rs.step.shape[1]), np.int64)
    drift = c.first_drift[joined]
    end = np.where(drift >= 0, drift + 1, c.compared[joined].clip(0))
    cols = np.arange(mat.shape[1])
    at_risk = (cols < end[:, None]) & (mat >= 0)
    events = at_risk & (cols == drift[:, None])
    steps = mat[at_risk]
    own_prefill = rs.prefill[loc[joined]][at_risk] if joined.any() else np.zeros(0, bool)
    row_kind = 2 * own_prefill.astype(np.int64) + (shapes.kind[steps] == MIXED).astype(np.int64)
    ev = events[at_risk]
    rec_of_cell = np.broadcast_to(np.arange(len(mat))[:, None], mat.shape)[at_risk]
    rec_rows = loc[joined]

    def flag(values: npt.NDArray[np.bool_]) -> Ints:
        return values[rec_rows][rec_of_cell].astype(np.int64)

    factors: list[Factor] = []
    for name, codes, names in (
        ("step kind", row_kind, list(ROW_KIND_NAMES)),
        ("others in the step", _bucket(shapes.requests[steps] - 1, OTHERS_EDGES), _bucket_names(OTHERS_EDGES)),
        ("tokens in the step", _bucket(shapes.tokens[steps], TOKENS_EDGES), _bucket_names(TOKENS_EDGES)),
        ("prompt split into chunks", flag(rs.chunks > 1), ["no", "yes"]),
        ("prefix-cache hit", flag(rs.cache_hit), ["no", "yes"]),
        ("preempted", flag(rs.preempted), ["no", "yes"]),
    ):
        rows = _rows(codes, ev, names)
        factors.append({"factor": name, "rows": rows, "separates": _separation(rows)[0]})
    drifted_joined = int((drift >= 0).sum())
    listed: list[RecordDrift] = []
    for i in np.flatnonzero(c.first_drift >= 0)[:LISTED_MAX].tolist():
        own = rs.step[loc[i]] if loc[i] >= 0 else None
        pre = rs.prefill[loc[i]] if loc[i] >= 0 else None
        d, f = int(c.first_drift[i]), int(c.first_flip[i])
        listed.append(
            {
                "request_id": str(c.request_id[i]),
                "level": int(c.level[i]),
                "first_drift": d,
                "first_flip": f if f >= 0 else None,
                "drift_step": _step_at(int(own[d]), bool(pre[d]), shapes)
                if own is not None and pre is not None and d < len(own)
                else None,
                "flip_step": _step_at(int(own[f]), bool(pre[f]), shapes)
                if own is not None and pre is not None and 0 <= f < len(own)
                else None,
            }
        )
    return {
        "source": source,
        "records": len(c.rows),
        "joined": int(joined.sum()),
        "drifted": drifted_joined,
        "positions": int(at_risk.sum()),
        "factors": factors,
        "sentence": _sentence(factors, drifted_joined, int(joined.sum())),
        "drifts": listed,
        "listed_max": LISTED_MAX,
    }
