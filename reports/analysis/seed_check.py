"""The CI gate on the seed contracts: ``--max-seed-mismatch``, ``--max-seed-collision``, ``--max-duplicate-choices``,
``--max-route-mismatch`` against report.json's ``seed_contracts`` (``reports.analysis.seed_contracts``).

Why apart from ``reports.analysis.check``: those thresholds read each canary's own figures; these read the
contracts between canaries, a section of its own. The rule is the gate's: a figure that cannot be computed
(no sampled canary, no completions at the level, a level the run never reached) fails its threshold. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loadgen.core.thresholds import EVERY_LEVEL, SEED_METRICS, Threshold
from reports.analysis.check import Outcome
from reports.model.report import Report
from reports.model.seeds import Rate


def _name(block: dict[str, Any]) -> str:
    if "canary" in block:
        return str(block["canary"])
    route = block.get("route")
    if route is not None:
        return f"{block['family']} on {route}"
    return f"{block['family']} seed {block.get('seed')}"


def _judge(t: Threshold, who: str, scope: str, figure: Rate | None) -> Outcome:
    option = t.metric.replace("_", "-")
    name = f"{who} {scope}: {option} {t.limit:g}"
    if figure is None:
        return Outcome(name, who, scope, t.metric, t.limit, None, False, f"{scope} is not in the report")
    if not figure["n"] or figure["rate"] is None:
        return Outcome(name, who, scope, t.metric, t.limit, None, False, "cannot be computed (no completions)")
    ok = figure["rate"] <= t.limit
    ci = figure["ci95"]
    shown = f" (95% CI {ci[0]:.3g}-{ci[1]:.3g})" if ci else ""
    message = f"{figure['k']} of {figure['n']} = {figure['rate']:g}{shown}, required <= {t.limit:g}"
    return Outcome(name, who, scope, t.metric, t.limit, figure["rate"], ok, message)


def seed_outcomes(report: Report, thresholds: Sequence[Threshold]) -> list[Outcome]:
    """One outcome per threshold and contract block (and level, for ``@LEVEL`` / ``@each``)."""
    contracts: Any = report.get("seed_contracts") or {}
    out: list[Outcome] = []
    for t in thresholds:
        blocks = contracts.get(SEED_METRICS[t.metric]) or []
        if not blocks:
            why = f"the report has no {SEED_METRICS[t.metric]} seed contract (no canary asks for it)"
            out.append(Outcome(t.metric, "-", "overall", t.metric, t.limit, None, False, why))
        for block in blocks:
            who = _name(block)
            by_level = {lv["concurrency"]: lv for lv in block["levels"]}
            if t.level is None:
                out.append(_judge(t, who, "overall", block["overall"]))
            elif t.level == EVERY_LEVEL:
                out += [_judge(t, who, f"concurrency {lv}", by_level[lv]) for lv in sorted(by_level)]
            else:
                out.append(_judge(t, who, f"concurrency {t.level}", by_level.get(t.level)))
    return out
