"""``loadgen.core.claims``: the exact binomial behind "divergence rate < P at 95%", and the gate built on it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core.claims import (
    ALPHA,
    MAX_CLAIM_CANARIES,
    binom_cdf,
    canaries_needed,
    level_claim,
    rule_of_three,
    supports,
    upper_bound,
    validate_rate,
)
from loadgen.core.errors import UsageError
from reports.analysis.check import claim_outcomes
from reports.model.report import Report
from tests.reports.runkit import partial_report

rates = st.floats(min_value=1e-3, max_value=0.99, allow_nan=False)
sizes = st.integers(min_value=1, max_value=400)


def test_known_values() -> None:
    assert canaries_needed(0.05) == 59 and rule_of_three(0.05) == 60
    assert canaries_needed(0.3) == 9 and canaries_needed(0.01) == 299
    assert upper_bound(0, 59) == pytest.approx(1 - 0.05 ** (1 / 59))
    assert upper_bound(3, 3) == 1.0 and upper_bound(0, 0) is None
    assert upper_bound(1, 10) == pytest.approx(0.3942, abs=1e-4)  # Clopper-Pearson one-sided 95%, k=1, n=10


@given(rates)
def test_needed_is_the_smallest_n_with_no_divergence_that_supports_the_claim(p: float) -> None:
    n = canaries_needed(p)
    assert (1 - p) ** n <= ALPHA * (1 + 1e-12)
    assert n == 1 or (1 - p) ** (n - 1) > ALPHA * (1 - 1e-12)
    assert supports(0, n, p) and not supports(0, n - 1, p)
    assert n <= rule_of_three(p) + 1  # the rule of three approximates it (from above, for small p)
    assert n == math.ceil(math.log(ALPHA) / math.log(1 - p)) or abs(n - math.log(ALPHA) / math.log(1 - p)) < 1e-9


@given(sizes)
def test_zero_divergence_bound_is_closed_form(n: int) -> None:
    assert upper_bound(0, n) == pytest.approx(1 - ALPHA ** (1 / n), rel=1e-12)


@settings(max_examples=60)
@given(st.integers(min_value=0, max_value=30), sizes)
def test_bound_is_the_clopper_pearson_point(k: int, n: int) -> None:
    if k >= n:
        assert upper_bound(k, n) == 1.0
        return
    u = upper_bound(k, n)
    assert u is not None and k / n <= u <= 1
    assert binom_cdf(k, n, u) == pytest.approx(ALPHA, abs=1e-6)


@settings(max_examples=60)
@given(st.integers(min_value=0, max_value=20), sizes)
def test_bounds_are_monotone(k: int, n: int) -> None:
    ub = upper_bound(k, n)
    assert ub is not None
    more_clean, more_div = upper_bound(k, n + 1), upper_bound(k + 1, n)
    assert more_clean is not None and more_div is not None
    assert more_clean <= ub + 1e-9  # more clean evidence: a lower bound
    assert more_div >= ub - 1e-9  # more divergences: a higher bound


@settings(max_examples=80)
@given(st.integers(min_value=0, max_value=20), sizes, rates)
def test_supports_agrees_with_the_bound(k: int, n: int, p: float) -> None:
    ub = upper_bound(k, n)
    assert ub is not None
    if abs(ub - p) > 1e-6:  # away from the boundary, where bisection and the direct test may round apart
        assert supports(k, n, p) == (ub < p)


def test_validate_rate() -> None:
    assert validate_rate("0.3") == 0.3
    for bad in ("0", "1", "-0.1", "1.5", "nan", "x"):
        with pytest.raises(UsageError, match="--claim-max-rate"):
            validate_rate(bad)
    with pytest.raises(UsageError, match=f"at most {MAX_CLAIM_CANARIES}"):
        validate_rate("0.0001")


def test_level_claim_status() -> None:
    assert level_claim(0, 9, 0.3, asked=True, planned=9)["status"] == "holds"
    assert level_claim(0, 5, 0.3, asked=True, planned=9)["status"] == "too_few"
    assert level_claim(1, 3, 0.3, asked=True, planned=9, ended_early=True)["status"] == "impossible"
    assert level_claim(1, 9, 0.3, asked=True, planned=9)["status"] == "impossible"
    assert level_claim(None, 9, 0.3, asked=True, planned=9)["status"] == "unknown"
    # one divergence in enough canaries can still support the claim
    assert level_claim(1, 40, 0.3, asked=True, planned=40)["holds"]


def _report(levels: dict[int, tuple[int, int]]) -> Report:
    lvs = [{"concurrency": lv, "diverged": k, "completions": n} for lv, (k, n) in levels.items()]
    return partial_report(
        run={"levels": sorted(levels), "canaries_per_level": 9}, canaries=[{"id": "c", "levels": lvs}]
    )


def test_claim_outcomes_name_the_failing_levels() -> None:
    out = claim_outcomes(_report({0: (0, 9), 4: (1, 2), 8: (0, 5)}), 0.3)
    assert [(o.scope, o.passed) for o in out] == [
        ("concurrency 0", True),
        ("concurrency 4", False),
        ("concurrency 8", False),
    ]
    assert "impossible" in out[1].message and "9 clean completions needed" in out[2].message
    missing = claim_outcomes(partial_report(run={"levels": [0, 4]}, canaries=[{"id": "c", "levels": []}]), 0.3)
    assert not any(o.passed for o in missing)
