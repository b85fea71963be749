"""The CI gate: evaluate thresholds against a report; JUnit XML so CI shows each threshold as a test.

Pure evaluation (``check_report``, ``integrity``) plus one writer (``junit_xml`` returns text; the
command writes it). A threshold applies overall, to one concurrency level, or to every level, for
every canary. A figure that cannot be computed (no completions, a level the run never reached) fails
its threshold: a gate must not pass on missing data. For the same reason ``integrity`` adds checks no
option turns off: the run finished, every planned level has completions for every canary, no record
was lost (write failures, torn or corrupt lines), and at most ``max_error_rate`` of the canaries failed
(default ``DEFAULT_MAX_ERROR_RATE``; ``--max-error-rate`` relaxes it). The thresholds themselves (names, ranges,
parsing) are ``loadgen.core.thresholds``, which the command's parser is built from.
"""

from __future__ import annotations

from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from loadgen.core.claims import describe, level_claim
from loadgen.core.thresholds import DEFAULT_MAX_ERROR_RATE, METRICS, Threshold
from reports.analysis.level_load import kinds_text
from reports.analysis.verdict import completed, said_failed
from reports.model.report import Figures, Report


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


def _judge(t: Threshold, canary: str, scope: str, figures: Figures | None) -> Outcome:
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


def check_report(report: Report, thresholds: list[Threshold]) -> CheckResult:
    outcomes: list[Outcome] = []
    for entry in report["canaries"]:
        cid = str(entry["id"])
        by_level = {lv["concurrency"]: lv for lv in entry["levels"]}
        for t in thresholds:
            if t.level is None:
                outcomes.append(_judge(t, cid, "overall", entry["overall"]))
            elif isinstance(t.level, int):
                outcomes.append(_judge(t, cid, f"concurrency {t.level}", by_level.get(t.level)))
            else:  # EVERY_LEVEL
                outcomes += [_judge(t, cid, f"concurrency {lv}", by_level[lv]) for lv in sorted(by_level)]
    if not report["canaries"]:
        outcomes += [
            Outcome(f"{t.metric}", "-", "overall", t.metric, t.limit, None, False, "the run has no canary records")
            for t in thresholds
        ]
    return CheckResult(outcomes)


def _fact(name: str, passed: bool, message: str, limit: float = 0.0, actual: float | None = None) -> Outcome:
    return Outcome(name, "run", "run", name, limit, actual, passed, message)


def integrity(
    report: Report, max_error_rate: float = DEFAULT_MAX_ERROR_RATE, *, allow_unmeasured: bool = False
) -> list[Outcome]:
    """The checks every gate makes: the run finished, every planned level of every canary has completions and
    was measured at its level (its load was there: ``reports.analysis.level_load``; ``allow_unmeasured`` lets a level
    that was not pass, the check still listed), nothing was lost, and at most ``max_error_rate`` of the canaries
    failed. Reads ``report["health"]`` (``reports.analysis.health``) where the report has it, else what an older
    ``report.json`` holds."""
    run = report.get("run", {})
    health = report.get("health", {})
    status = run.get("status")
    done = completed(status)  # its losses and its errors are judged below
    cut = "" if done else ": the run did not finish, its figures cover only part of the plan"
    out = [_fact("run finished", done, f"status {status!r}{cut}")]
    planned = set(run.get("levels") or [])
    for entry in report.get("canaries") or []:
        empty = [lv["concurrency"] for lv in entry["levels"] if lv["concurrency"] in planned and not lv["completions"]]
        name = f"{entry['id']}: every planned level has completions"
        why = f"no completions at concurrency {', '.join(map(str, empty))}" if empty else "yes"
        out.append(Outcome(name, str(entry["id"]), "run", "completions", 0, len(empty), not empty, why))
        off = [lv for lv in entry["levels"] if lv["concurrency"] in planned and lv.get("not_measured")]
        name = f"{entry['id']}: every planned level measured at its level"
        why = "; ".join(f"concurrency {lv['concurrency']}: {lv['not_measured']}" for lv in off) or "yes"
        if off:
            why = ("allowed (--allow-unmeasured-levels): " if allow_unmeasured else "evidence incomplete: ") + why
        passed = not off or allow_unmeasured
        out.append(Outcome(name, str(entry["id"]), "run", "not_measured", 0, len(off), passed, why))
    lost = int(health.get("records_lost") or 0) + int(health.get("canaries_reported_not_read") or 0)
    torn, skipped = health.get("torn_files") or [], int(report.get("input", {}).get("skipped_lines") or 0)
    unreadable = int(health.get("write_failures", {}).get("unreadable") or 0)
    parts = [f"{lost} record(s) could not be written"] if lost else []
    parts += [f"{', '.join(torn)} end(s) in a torn line"] if torn else []
    parts += [f"{skipped} unreadable line(s) skipped"] if skipped else []
    parts += [f"{unreadable} process file(s) unreadable"] if unreadable else []
    if status == "finished_with_losses" and not parts:
        parts.append("the run says records were lost (status 'finished_with_losses')")
    out.append(_fact("no records lost", not parts, "; ".join(parts) or "none", 0, lost + skipped))
    if "errors" in health:
        errors, sent, kinds = int(health["errors"]), int(health["canaries"]), dict(health.get("error_kinds") or {})
    else:
        blocks = [e["overall"] for e in report.get("canaries") or []]
        errors, sent = sum(b["errors"] for b in blocks), sum(b["canaries"] for b in blocks)
        kinds = {}
        for b in blocks:
            for k, n in (b.get("error_kinds") or {}).items():
                kinds[k] = kinds.get(k, 0) + n
    rate = errors / sent if sent else 0.0
    first = f"; the first: {health['first_error']}" if health.get("first_error") else ""
    failed = f"{errors} of {sent} canaries failed" + (f" ({kinds_text(kinds)}{first})" if kinds else "")
    dead = "the endpoint failed: " if said_failed(status, bool(health.get("endpoint_failed"))) else ""
    ok = rate <= max_error_rate and not dead
    message = f"{dead}{failed}: error rate {100 * rate:.1f}%, allowed {100 * max_error_rate:g}% (--max-error-rate)"
    out.append(_fact("error rate", ok, message, max_error_rate, rate))
    return out


def claim_outcomes(report: Report, max_rate: float) -> list[Outcome]:
    """``--claim-max-rate P``: per canary and planned level, "divergence rate < P at 95%" holds
    (``loadgen.core.claims.supports`` on the level's diverged and completions; a level ended early by the claim
    rule is judged on what it has). A planned level the report lacks, or without a reference, fails."""
    run = report.get("run", {})
    planned = sorted(set(run.get("levels") or []))
    name_of = f"claim rate < {max_rate:g} at 95%"
    out: list[Outcome] = []
    for entry in report.get("canaries") or []:
        cid = str(entry["id"])
        by_level = {lv["concurrency"]: lv for lv in entry["levels"]}
        for level in planned:
            scope = f"concurrency {level}"
            lv = by_level.get(level)
            early = lv is not None and "claim" in lv and lv["claim"]["ended_early"]
            if lv is None:
                claim = None
            else:
                claim = level_claim(
                    lv.get("diverged"),
                    int(lv.get("completions") or 0),
                    max_rate,
                    asked=True,
                    planned=run.get("canaries_per_level"),
                    ended_early=early,
                )
            passed = bool(claim and claim["holds"])
            why = "not in the report" if claim is None else describe(claim)  # the name already says the scope
            bound = None if claim is None else claim["upper_bound"]
            out.append(Outcome(f"{cid} {scope}: {name_of}", cid, scope, "claim_max_rate", max_rate, bound, passed, why))
    if not report.get("canaries"):
        out.append(_fact(name_of, False, "the run has no canary records", max_rate))
    return out


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
