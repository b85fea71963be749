"""check: thresholds overall, per level and at each level; failing on missing data; JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from collectors.read.runfolder import ColumnBuilder
from loadgen.core.errors import UsageError
from loadgen.core.thresholds import Threshold
from reports.analysis.canary import analyse
from reports.analysis.check import check_report, junit_xml
from reports.model.report import Report
from tests.reports.runkit import partial_report, rec


@pytest.fixture(scope="module")
def report() -> Report:
    b = ColumnBuilder()
    records = [rec([1, 2, 3], phase="baseline"), rec([1, 2, 3], level=1), rec([1, 2, 3], level=1)]
    records += [rec([1, 2, 3], level=4), rec([1, 5, 3], level=4), rec(None, level=4, status="error")]
    for r in records:
        b.add(r)
    return partial_report(canaries=analyse(b.finish()))


def outcomes(report: Report, metric: str, spec: str) -> list[tuple[str, bool]]:
    return [(o.scope, o.passed) for o in check_report(report, [Threshold.parse(metric, spec)]).outcomes]


def test_overall_thresholds(report: Report) -> None:
    assert outcomes(report, "max_unique", "2") == [("overall", True)]
    assert outcomes(report, "max_unique", "1") == [("overall", False)]
    assert outcomes(report, "max_errors", "0") == [("overall", False)]
    assert outcomes(report, "min_earliest_divergence", "1") == [("overall", True)]
    assert outcomes(report, "min_earliest_divergence", "2") == [("overall", False)]
    assert outcomes(report, "max_divergence_rate", "0.25") == [("overall", True)]  # 1 of 4 completions
    assert outcomes(report, "max_divergence_rate", "0.2") == [("overall", False)]


def test_per_level_and_each_level(report: Report) -> None:
    assert outcomes(report, "max_unique", "1@1") == [("concurrency 1", True)]
    assert outcomes(report, "max_unique", "1@each") == [("concurrency 1", True), ("concurrency 4", False)]
    assert outcomes(report, "min_earliest_divergence", "5@1") == [("concurrency 1", True)]  # no divergence
    assert outcomes(report, "max_unique", "1@16") == [("concurrency 16", False)]  # never reached: fails


def test_bad_threshold_values_name_the_option() -> None:
    with pytest.raises(UsageError, match="--max-unique 'x'"):
        Threshold.parse("max_unique", "x")
    with pytest.raises(UsageError, match="--max-errors '1@high'"):
        Threshold.parse("max_errors", "1@high")


def test_junit_lists_each_threshold_as_a_test(report: Report) -> None:
    result = check_report(report, [Threshold.parse("max_unique", "1@each"), Threshold.parse("max_errors", "5")])
    root = ET.fromstring(junit_xml(result))
    suite = root.find("testsuite")
    assert suite is not None and suite.get("tests") == "3" and suite.get("failures") == "1"
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert failed == ["c0 concurrency 4: max-unique 1"]
    assert not result.passed
