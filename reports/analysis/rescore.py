"""The re-score check (docs/design.md, "The re-score check"): are the logprobs a canary returned those a
teacher-forced re-score of the same ids gives, alone and at the canary's level?

Per canary and level (baseline, then each sweep level), for each completion of a canary that asked
(``rescore = true``): its decode logprobs (what the at-level record carries from the canary) against its at-level
re-score and against the alone re-score of the same ids (joined by endpoint kind, prompt ids and output ids).
Per side: how many were re-scored, how many bitwise equal at every output position, the mismatch rate with its
Wilson interval, the first mismatching position (min/median/max), the largest |Δ logprob|, and ``TOPK_DISTANCE``
over positions. A completion without a usable re-score counts under ``unmeasured`` by its kind; a side with none
is unmeasured, never 0. Pure: records in, the typed section out.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence

from loadgen.core.rescore_record import RescoreRecord
from loadgen.core.stats import ratio, wilson
from reports.model.rescore import RescoreCanary, RescoreCheck, RescoreLevel, RescoreSide, Spread
from reports.model.seeds import Rate

TOPK_DISTANCE = (
    "total variation between the decode's and the re-score's alternatives at a position, each renormalised over "
    "the tokens it lists, over the union of the two lists; per completion its largest over positions"
)
NOT_SENT = "not_rescored"  # the alone pass sent nothing for these ids (it stopped, or did not run)
WHY = {  # each kind of unmeasured re-score, as a notice says it
    "no_prompt_logprobs": "the endpoint returned no prompt logprobs (vLLM: `prompt_logprobs` on /v1/completions; "
    "SGLang: `return_logprob` with `logprob_start_len`)",
    "fewer_positions": "the endpoint returned fewer positions than the ids sent",
    "other_ids": "the endpoint returned logprobs for other ids than the ones sent",
    "malformed": "the endpoint's answer was not the shape its dialect documents",
    "no_prompt_ids": "the canary's answer carried no prompt token ids to send back (vLLM: `return_token_ids`)",
    "no_decode_logprobs": "the canary's answer had no output ids or logprobs to compare with",
    NOT_SENT: "the alone pass did not reach these completions (it stopped, or did not run)",
}


def positions(decode: Sequence[float], rescored: Sequence[float]) -> tuple[int | None, float]:
    """The first output position whose logprobs are not bitwise equal (None: all equal) and the largest |Δ|."""
    first = next((i for i, (a, b) in enumerate(zip(decode, rescored, strict=True)) if a != b), None)
    deltas = [abs(a - b) for a, b in zip(decode, rescored, strict=True) if not (math.isnan(a) or math.isnan(b))]
    return first, max(deltas, default=0.0)


def total_variation(a: Sequence[tuple[str, float]], b: Sequence[tuple[str, float]]) -> float | None:
    """``TOPK_DISTANCE`` at one position: 0 for the same alternatives, 1 for disjoint ones; None where either
    lists nothing usable."""
    p, q = _distribution(a), _distribution(b)
    if not p or not q:
        return None
    return 0.5 * sum(abs(p.get(t, 0.0) - q.get(t, 0.0)) for t in p.keys() | q.keys())


def _distribution(top: Sequence[tuple[str, float]]) -> dict[str, float]:
    weights = {t: math.exp(lp) for t, lp in top if math.isfinite(lp)}
    total = sum(weights.values())
    return {t: w / total for t, w in weights.items()} if total > 0 else {}


def _topk(decode: RescoreRecord, rescored: RescoreRecord) -> float | None:
    if decode.decode_top is None or rescored.top_logprobs is None:
        return None
    tvs = [total_variation(a, b) for a, b in zip(decode.decode_top, rescored.top_logprobs, strict=False)]
    found = [t for t in tvs if t is not None]
    return max(found) if found else None


def _spread(values: list[float]) -> Spread | None:
    if not values:
        return None
    return {"min": min(values), "median": float(statistics.median(values)), "max": max(values)}


def side(pairs: Sequence[tuple[RescoreRecord, RescoreRecord | None]], concurrency: int | None) -> RescoreSide:
    """One side's figures from (the completion's at-level record, its re-score on this side or None)."""
    unmeasured: Counter[str] = Counter()
    firsts: list[float] = []
    deltas: list[float] = []
    tvs: list[float] = []
    equal = rescored = 0
    for canary, got in pairs:
        why = _unusable(canary, got)
        if why is not None:
            unmeasured[why] += 1
            continue
        assert got is not None and got.logprobs is not None and canary.decode_logprobs is not None
        rescored += 1
        first, delta = positions(canary.decode_logprobs, got.logprobs)
        equal += first is None
        if first is not None:
            firsts.append(first)
        deltas.append(delta)
        if (tv := _topk(canary, got)) is not None:
            tvs.append(tv)
    k = rescored - equal
    ci = wilson(k, rescored)
    mismatch: Rate = {
        "concurrency": concurrency,
        "n": rescored,
        "k": k,
        "rate": ratio(k, rescored),
        "ci95": None if ci is None else list(ci),
    }
    note = None
    if not rescored:
        reasons = ", ".join(f"{kind} {n}" for kind, n in sorted(unmeasured.items())) or "no completions"
        note = f"unmeasured: {reasons}"
    return {
        "completions": len(pairs),
        "rescored": rescored,
        "bitwise_equal": equal,
        "mismatch": mismatch,
        "first_mismatch": _spread(firsts),
        "max_abs_delta": max(deltas) if deltas else None,
        "topk_tv": _spread(tvs),
        "unmeasured": dict(sorted(unmeasured.items())),
        "note": note,
    }


def _unusable(canary: RescoreRecord, got: RescoreRecord | None) -> str | None:
    """Why this completion has no usable re-score on a side, or None."""
    if canary.status != "ok" and canary.error_kind in ("no_prompt_ids", "no_decode_logprobs"):
        return canary.error_kind  # nothing could be sent on either side
    if got is None:
        return NOT_SENT
    if got.status != "ok" or got.logprobs is None:
        return got.error_kind or "error"
    if canary.decode_logprobs is None or len(got.logprobs) != len(canary.decode_logprobs):
        return "fewer_positions"
    return None


def _key(r: RescoreRecord) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    return r.endpoint, tuple(r.prompt_ids or ()), tuple(r.output_ids or ())


def rescore_check(records: Sequence[RescoreRecord], files: Sequence[str] = ()) -> RescoreCheck | None:
    """The ``rescore`` section, or None where no canary asked for a re-score (no records)."""
    if not records:
        return None
    alone: dict[tuple[str, tuple[int, ...], tuple[int, ...]], RescoreRecord] = {}
    for r in sorted((r for r in records if r.mode == "alone"), key=lambda r: r.sent_at):
        alone.setdefault(_key(r), r)  # one per distinct ids; a repeat (a second pass) never overrides the first
    grouped: dict[str, dict[tuple[int, int], list[RescoreRecord]]] = defaultdict(lambda: defaultdict(list))
    for r in sorted((r for r in records if r.mode == "at_level"), key=lambda r: (r.sent_at, r.request_id)):
        grouped[r.canary_id][(0 if r.phase == "baseline" else 1, r.level)].append(r)
    canaries: list[RescoreCanary] = []
    for cid in sorted(grouped):
        levels: list[RescoreLevel] = []
        for (stage, level), rows in sorted(grouped[cid].items()):
            scope = level if stage else None
            levels.append(
                {
                    "phase": "sweep" if stage else "baseline",
                    "concurrency": level,
                    "alone": side([(r, alone.get(_key(r)) if r.prompt_ids else None) for r in rows], scope),
                    "at_level": side([(r, r) for r in rows], scope),
                }
            )
        canaries.append({"canary": cid, "levels": levels})
    kinds: Counter[str] = Counter()
    for c in canaries:
        for lv in c["levels"]:
            kinds.update(lv["alone"]["unmeasured"])
            kinds.update(lv["at_level"]["unmeasured"])
    notices = [f"Re-score check: {n} re-score(s) unmeasured: {WHY.get(k, k)}." for k, n in sorted(kinds.items())]
    return {
        "topk_distance": TOPK_DISTANCE,
        "canaries": canaries,
        "records": len(records),
        "files": list(files),
        "notices": notices,
    }
