"""The CI gate on the re-score check: ``--max-rescore-mismatch RATE[@LEVEL|@each]`` against report.json's
``rescore`` (``reports.analysis.rescore``).

Why apart from ``reports.analysis.check``: it reads its own section. Each canary's re-scores are judged alone and
at level, each an outcome: the share of re-scored completions whose logprobs were not bitwise the decode's at
every output position. Without ``@``, over every sweep level pooled; ``@LEVEL`` that sweep level; ``@each`` every
sweep level. A side with nothing re-scored (the engine gave no usable answer, or no canary asked) fails: a gate
must not pass on missing data. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.core.stats import ratio, wilson
from loadgen.core.thresholds import EVERY_LEVEL, Threshold
from reports.analysis.check import Outcome
from reports.model.report import Report
from reports.model.rescore import RescoreLevel

SIDES = ("alone", "at_level")


def _judge(t: Threshold, who: str, scope: str, levels: list[RescoreLevel]) -> list[Outcome]:
    out = []
    for side in SIDES:
        name = f"{who} {scope} {side.replace('_', ' ')}: max-rescore-mismatch {t.limit:g}"
        if not levels:
            out.append(Outcome(name, who, scope, t.metric, t.limit, None, False, f"{scope} is not in the report"))
            continue
        k = sum(lv[side]["mismatch"]["k"] for lv in levels)  # type: ignore[literal-required]
        n = sum(lv[side]["mismatch"]["n"] for lv in levels)  # type: ignore[literal-required]
        rate = ratio(k, n)
        if not n or rate is None:
            notes = "; ".join(str(lv[side]["note"]) for lv in levels if lv[side]["note"])  # type: ignore[literal-required]
            why = f"unmeasured: nothing re-scored ({notes or 'no completions'})"
            out.append(Outcome(name, who, scope, t.metric, t.limit, None, False, why))
            continue
        ci = wilson(k, n)
        shown = f" (95% CI {ci[0]:.3g}-{ci[1]:.3g})" if ci else ""
        message = f"{k} of {n} not bitwise equal = {rate:g}{shown}, required <= {t.limit:g}"
        out.append(Outcome(name, who, scope, t.metric, t.limit, rate, rate <= t.limit, message))
    return out


def rescore_outcomes(report: Report, thresholds: Sequence[Threshold]) -> list[Outcome]:
    """Two outcomes (alone, at level) per threshold, canary and scope."""
    section = report.get("rescore")
    out: list[Outcome] = []
    for t in thresholds:
        if section is None or not section["canaries"]:
            why = "unmeasured: the report has no re-score check (no canary asks for rescore = true)"
            out.append(Outcome(t.metric, "-", "overall", t.metric, t.limit, None, False, why))
            continue
        for entry in section["canaries"]:
            sweep = [lv for lv in entry["levels"] if lv["phase"] == "sweep"]
            if t.level is None:
                out += _judge(t, entry["canary"], "sweep", sweep)
            elif t.level == EVERY_LEVEL:
                for lv in sweep:
                    out += _judge(t, entry["canary"], f"concurrency {lv['concurrency']}", [lv])
            else:
                at = [lv for lv in sweep if lv["concurrency"] == t.level]
                out += _judge(t, entry["canary"], f"concurrency {t.level}", at)
    return out
