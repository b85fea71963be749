"""Which side's load the divergence follows, in one sentence: the rule, stated once.

docs/design.md ("Prefill/decode: servers behind one endpoint"). For each side, the sweep's completions measured
there are grouped by that side's load (a canary's median of other requests there, rounded); the side's lowest
and highest groups are compared. The divergence **follows** a side when the highest group's divergence rate is
above the lowest's with their 95% Wilson intervals apart (the high group's lower bound above the low group's
upper bound). Per side that is ``follows``, ``flat`` (one group: its load did not vary, so nothing can follow
it), ``too_few`` (an end group with fewer than ``MIN_GROUP`` completions), ``unmeasured``, or ``no`` (the two
ends compared and the intervals overlap, or the rate falls with load). The outcome:

- ``neither`` when no completion diverged;
- ``prefill``, ``decode`` or ``both``: the sides the divergence follows;
- else ``too few canaries`` when a side is ``too_few`` or ``unmeasured``, and ``neither`` when every side was
  compared (or flat) and none follows.

Interval separation is deliberately strict: with 4 completions at each end it takes 0 of 4 against 4 of 4.
Two sweeps, one per side (``background.side``), keep the other side flat, so each side is judged alone. Pure.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from loadgen.core.servers import SIDES, Side
from loadgen.core.stats import wilson
from reports.model.coresidency import SideContrast, SideFollows, SideGroup, SidesOutcome

MIN_GROUP = 3


def contrast(others: npt.ArrayLike, diverged: npt.ArrayLike) -> SideContrast:
    """One side's lowest and highest load groups and whether the divergence follows it. ``others``: NaN where
    the completion was not measured on the side."""
    x = np.asarray(others, dtype=np.float64)
    d = np.asarray(diverged, dtype=bool)
    known = np.isfinite(x)
    if not known.any():
        return {"verdict": "unmeasured", "low": None, "high": None}
    group = np.rint(x[known]).astype(np.int64)
    dk = d[known]
    lo_g, hi_g = int(group.min()), int(group.max())
    low, high = _group(group, dk, lo_g), _group(group, dk, hi_g)
    if lo_g == hi_g:
        return {"verdict": "flat", "low": low, "high": high}
    if min(low["completions"], high["completions"]) < MIN_GROUP:
        return {"verdict": "too_few", "low": low, "high": high}
    lo_ci, hi_ci = wilson(low["diverged"], low["completions"]), wilson(high["diverged"], high["completions"])
    apart = lo_ci is not None and hi_ci is not None and hi_ci[0] > lo_ci[1]
    return {"verdict": "follows" if apart else "no", "low": low, "high": high}


def _group(group: npt.NDArray[np.int64], diverged: npt.NDArray[np.bool_], value: int) -> SideGroup:
    sel = group == value
    return {"others": value, "completions": int(sel.sum()), "diverged": int((sel & diverged).sum())}


def follows(others: dict[Side, npt.ArrayLike], diverged: npt.ArrayLike) -> SideFollows:
    """The outcome and its sentence over the sweep's completions: ``diverged`` per completion, ``others`` per
    side per completion (NaN: unmeasured there)."""
    d = np.asarray(diverged, dtype=bool)
    sides = {s: contrast(others[s], d) for s in SIDES}
    hits = [s for s in SIDES if sides[s]["verdict"] == "follows"]
    outcome: SidesOutcome
    if not d.any():
        outcome = "neither"
    elif hits:
        outcome = "both" if len(hits) == 2 else hits[0]
    elif any(sides[s]["verdict"] in ("too_few", "unmeasured") for s in SIDES):
        outcome = "too few canaries"
    else:
        outcome = "neither"
    text = sentence(outcome, sides, int(d.sum()))
    return {"outcome": outcome, "sentence": text, "prefill": sides["prefill"], "decode": sides["decode"]}


def _ends(c: SideContrast) -> str:
    low, high = c["low"], c["high"]
    if low is None or high is None:
        return "unmeasured"
    if c["verdict"] == "flat":
        return f"flat, {high['diverged']}/{high['completions']} at {high['others']} other requests"
    return (
        f"{low['diverged']}/{low['completions']} diverged at {low['others']} other requests, "
        f"{high['diverged']}/{high['completions']} at {high['others']}"
    )


def sentence(outcome: SidesOutcome, sides: dict[Side, SideContrast], diverged: int) -> str:
    """The one sentence the report prints."""
    detail = f"prefill side {_ends(sides['prefill'])}; decode side {_ends(sides['decode'])}"
    if diverged == 0:
        return f"No canary diverged, so the divergence follows neither side's load ({detail})."
    if outcome in ("prefill", "decode"):
        return f"The divergence follows the {outcome} side's load ({detail}; 95% intervals apart on that side only)."
    if outcome == "both":
        return f"The divergence follows both sides' load ({detail}): sweep one side at a time to tell them apart."
    if outcome == "too few canaries":
        return (
            f"Too few canaries to say which side's load the divergence follows ({detail}; at least {MIN_GROUP} "
            "measured completions are needed at each side's lowest and highest load)."
        )
    return f"The divergence follows neither side's load ({detail}; no side's 95% intervals apart)."
