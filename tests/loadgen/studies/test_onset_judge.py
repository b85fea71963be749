"""The onset rule on one level's report: clean, divergent, or inconclusive (and why), and its 95% bound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadgen.studies.onset import CLEAN, DIVERGENT, INCONCLUSIVE, judge, rule_block, upper_bound_95
from reports.model.report import Report
from tests.reports.runkit import partial_report

REF = ("token_ids", [1, 2, 3])


def report(*, diverged: int = 0, errors: int = 0, completions: int = 4, ref: dict[str, Any] | None = None) -> Report:
    level = {
        "concurrency": 2,
        "canaries": completions + errors,
        "completions": completions,
        "errors": errors,
        "diverged": diverged,
        "earliest_divergence": 5 if diverged else None,
        "co_residency": {"min": 2, "not_held": 0},
    }
    reference = {"kind": "baseline", "self_consistent": True, "request_id": "r", "identity": "token_ids", **(ref or {})}
    return partial_report(input={"records": 9}, canaries=[{"id": "c", "reference": reference, "levels": [level]}])


def verdict(rep: Report, refs: Any = None, first: Any = None, status: str = "finished") -> Any:
    return judge(2, Path("r"), status, rep, 4, {"c": REF} if refs is None else refs, first)


def test_clean_divergent() -> None:
    assert verdict(report()).verdict == CLEAN
    r = verdict(report(diverged=1))
    assert r.verdict == DIVERGENT and r.earliest_divergence == 5 and r.sent == 9
    assert verdict(report(diverged=1, errors=2, completions=2)).verdict == DIVERGENT  # a divergence is seen


@pytest.mark.parametrize(
    ("rep", "refs", "first", "status", "reason"),
    [
        (report(errors=1, completions=3), None, None, "finished", "1 errors, 3 of 4 canaries answered"),
        (report(), None, None, "endpoint_failed", "the run ended endpoint_failed"),
        (report(ref={"self_consistent": False}), None, None, "finished", "disagrees with itself alone"),
        (report(ref={"kind": "modal"}), None, None, "finished", "no baseline reference"),
        (report(), None, {"c": ("token_ids", [1, 2, 4])}, "finished", "differs from the first run's"),
        (report(), {"c": None}, None, "finished", "not in the records"),
    ],
)
def test_inconclusive_says_why(rep: Report, refs: Any, first: Any, status: str, reason: str) -> None:
    r = verdict(rep, refs, first, status)
    assert r.verdict == INCONCLUSIVE and r.reason is not None and reason in r.reason


def test_a_reference_that_moved_is_not_judged_even_with_divergence() -> None:
    r = verdict(report(diverged=3), first={"c": ("token_ids", [9])})
    assert r.verdict == INCONCLUSIVE


def test_the_bound_after_zero_in_n() -> None:
    assert upper_bound_95(12) == pytest.approx(0.2209, abs=1e-4)
    assert upper_bound_95(100) == pytest.approx(0.0295, abs=1e-4)  # about 3/n
    block = rule_block(12)
    assert block["upper_bound_95_rule_of_three"] == 0.25 and "below 22.1%" in block["statement"]
