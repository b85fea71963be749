"""The CI gate: evaluate thresholds against a report; JUnit XML so CI shows each threshold as a test.

Pure evaluation (``check_report``) plus one writer (``junit_xml`` returns text; the command writes
it). A threshold applies overall, to one concurrency level, or to every level, for every canary. A
figure that cannot be computed (no completions, a level the run never reached) fails its threshold:
a gate must not pass on missing data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from loadgen.errors import UsageError

# option name -> (figure key in report.json, "max" or "min")
METRICS = {
    "max_unique": ("unique_completions", "max"),
    "max_divergence_rate": ("divergence_rate", "max"),
    "min_earliest_divergence": ("earliest_divergence", "min"),
    "max_errors": ("errors", "max"),
}
EVERY_LEVEL = "each"


@dataclass(frozen=True)
class Threshold:
    metric: str  # a key of METRICS
    limit: float
    level: int | str | None = None  # None: overall; an int: that level; "each": every level

    @classmethod
    def parse(cls, metric: str, spec: str) -> Threshold:
        """``VALUE`` (overall), ``VALUE@LEVEL`` or ``VALUE@each``; errors name the option."""
        option = "--" + metric.replace("_", "-")
        value, _, where = spec.partition("@")
        try:
            limit = float(value)
        except ValueError as exc:
            raise UsageError(f"{option} {spec!r}: expected a number, optionally @LEVEL or @each") from exc
        if not where:
            return cls(metric, limit)
        if where == EVERY_LEVEL:
            return cls(metric, limit, EVERY_LEVEL)
        try:
            return cls(metric, limit, int(where))
        except ValueError as exc:
            raise UsageError(f"{option} {spec!r}: the level after @ must be an integer or 'each'") from exc


@dataclass(frozen=True)
class Outcome:
    name: str
    canary: str
    scope: str
    metric: str
    limit: float
    actual: float | int | None
    passed: bool
    message: str


@dataclass(frozen=True)
class CheckResult:
    outcomes: list[Outcome]

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outcomes)


def _judge(t: Threshold, canary: str, scope: str, figures: dict[str, Any] | None) -> Outcome:
    key, kind = METRICS[t.metric]
    name = f"{canary} {scope}: {t.metric.replace('_', '-')} {t.limit:g}"
    if figures is None:
        return Outcome(name, canary, scope, t.metric, t.limit, None, False, f"{scope} is not in the report")
    actual = figures.get(key)
    if actual is None:
        if kind == "min" and figures.get("completions"):
            return Outcome(name, canary, scope, t.metric, t.limit, None, True, "no divergence")
        return Outcome(
            name, canary, scope, t.metric, t.limit, None, False, f"{key} cannot be computed (no completions)"
        )
    ok = actual <= t.limit if kind == "max" else actual >= t.limit
    rel = "<=" if kind == "max" else ">="
    return Outcome(
        name, canary, scope, t.metric, t.limit, actual, ok, f"{key} = {actual:g}, required {rel} {t.limit:g}"
    )


def check_report(report: dict[str, Any], thresholds: list[Threshold]) -> CheckResult:
    outcomes: list[Outcome] = []
    for entry in report["canaries"]:
        cid = str(entry["id"])
        by_level = {lv["concurrency"]: lv for lv in entry["levels"]}
        for t in thresholds:
            if t.level is None:
                outcomes.append(_judge(t, cid, "overall", entry["overall"]))
            elif t.level == EVERY_LEVEL:
                outcomes += [_judge(t, cid, f"concurrency {lv}", by_level[lv]) for lv in sorted(by_level)]
            else:
                outcomes.append(_judge(t, cid, f"concurrency {t.level}", by_level.get(t.level)))
    if not report["canaries"]:
        outcomes += [
            Outcome(f"{t.metric}", "-", "overall", t.metric, t.limit, None, False, "the run has no canary records")
            for t in thresholds
        ]
    return CheckResult(outcomes)


def junit_xml(result: CheckResult, suite: str = "loadgen.check") -> str:
    failures = sum(not o.passed for o in result.outcomes)
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuites><testsuite name={quoteattr(suite)} tests="{len(result.outcomes)}" failures="{failures}">',
    ]
    for o in result.outcomes:
        case = f"<testcase classname={quoteattr(suite + '.' + o.canary)} name={quoteattr(o.name)}"
        if o.passed:
            lines.append(f"{case}><system-out>{escape(o.message)}</system-out></testcase>")
        else:
            lines.append(f"{case}><failure message={quoteattr(o.message)}>{escape(o.message)}</failure></testcase>")
    lines.append("</testsuite></testsuites>")
    return "\n".join(lines) + "\n"
