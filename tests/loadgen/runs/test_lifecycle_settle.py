"""``OwnedRun``'s status rule (``settle``): interrupted unless every stage completed; then the endpoint's
failure, then lost records, before a clean ``finished``."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.core.manifest import Manifest, RunStatus
from loadgen.runs.lifecycle import settle
from reports.analysis.verdict import endpoint_failed

NONE_LOST = {"canaries": 0, "background": 0, "processes": 1, "unreadable": 0}


def manifest(**facts: Any) -> Manifest:
    base = {"schema": 1, "canaries_per_level": 4, "scenario": {"canaries": [{"id": "a"}]}, "stages_finished": True}
    return Manifest.model_validate({**base, **facts})


@pytest.mark.parametrize(
    ("facts", "lost", "metrics", "status"),
    [
        ({"canaries_reported": 20, "canary_errors": 0}, NONE_LOST, None, RunStatus.FINISHED),
        (
            {"stages_finished": False, "canaries_reported": 20, "canary_errors": 20},
            NONE_LOST,
            None,
            RunStatus.INTERRUPTED,
        ),
        ({"canaries_reported": 20, "canary_errors": 18}, NONE_LOST, None, RunStatus.ENDPOINT_FAILED),  # nearly all
        ({"canaries_reported": 20, "canary_errors": 11}, NONE_LOST, None, RunStatus.FINISHED),  # many, but it lived
        (
            {"canaries_reported": 20, "canary_errors": 8, "canary_errors_trailing": 8},  # two levels' worth at the end
            NONE_LOST,
            None,
            RunStatus.ENDPOINT_FAILED,
        ),
        (
            {"canaries_reported": 20, "canary_errors": 4, "canary_errors_trailing": 4},  # one level: bad luck
            NONE_LOST,
            None,
            RunStatus.FINISHED,
        ),
        (
            {"canaries_reported": 20, "canary_errors": 0},
            {**NONE_LOST, "canaries": 3},
            None,
            RunStatus.FINISHED_WITH_LOSSES,
        ),
        ({"canaries_reported": 20}, {**NONE_LOST, "unreadable": 1}, None, RunStatus.FINISHED_WITH_LOSSES),
        ({"canaries_reported": 20}, NONE_LOST, {"write_failures": 5}, RunStatus.FINISHED_WITH_LOSSES),
    ],
)
def test_settle(facts: dict[str, Any], lost: dict[str, int], metrics: Any, status: RunStatus) -> None:
    assert settle(manifest(**facts), lost, metrics) == status


def test_the_endpoint_rule() -> None:
    assert not endpoint_failed(0, 0, 0, None)
    assert endpoint_failed(9, 10, 0, None) and not endpoint_failed(8, 10, 0, None)  # nearly all: 90%
    assert not endpoint_failed(2, 3, 2, None)  # fewer than three failures say nothing while one was answered
    assert endpoint_failed(2, 2, 2, None) and endpoint_failed(1, 1, 1, None)  # every canary failed: none measured
    assert endpoint_failed(3, 100, 3, 1)  # at least three in a row, however small a level
    assert not endpoint_failed(23, 100, 23, 12) and endpoint_failed(24, 100, 24, 12)  # two levels' worth
