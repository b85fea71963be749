"""``reports.analysis.verdict``: the status a run settles on, the endpoint's failure and a completed run, one rule
for the run's owner, the report's health and the CI gate."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.manifest import Manifest, RunStatus
from reports.analysis.verdict import completed, endpoint_failed, run_status, said_failed

counts = st.integers(min_value=0, max_value=200)


@given(
    finished=st.none() | st.booleans(),
    sent=counts,
    errors=counts,
    trailing=counts,
    quota=st.none() | st.integers(min_value=1, max_value=50),
    lost=st.booleans(),
)
def test_the_status_follows_the_rules_in_order(
    finished: bool | None, sent: int, errors: int, trailing: int, quota: int | None, lost: bool
) -> None:
    errors, trailing = min(errors, sent), min(trailing, errors)
    m = Manifest.model_validate(
        {
            "schema": 1,
            "stages_finished": finished,
            "canaries_reported": sent,
            "canary_errors": errors,
            "canary_errors_trailing": trailing,
        }
    )
    status = run_status(m, quota, lost=lost)
    if not finished:
        assert status == RunStatus.INTERRUPTED
    elif endpoint_failed(errors, sent, trailing, quota):
        assert status == RunStatus.ENDPOINT_FAILED
    else:
        assert status == (RunStatus.FINISHED_WITH_LOSSES if lost else RunStatus.FINISHED)
    assert completed(status) == bool(finished)  # a settled run completed exactly when its stages did


def test_completed_is_the_status_enums_and_an_unknown_status_is_not() -> None:
    assert [s for s in RunStatus if completed(s)] == [s for s in RunStatus if s.completed]
    assert completed("endpoint_failed") and not completed("interrupted")
    assert not completed(None) and not completed("a status from a later version")


def test_the_endpoint_failed_when_its_status_or_the_rule_says_so() -> None:
    assert said_failed("endpoint_failed", False) and said_failed("finished", True)
    assert not said_failed("finished", False) and not said_failed(None, False)
