"""Background that fails: a slot's pause after failures in a row, and when a stage's background has failed for good.

Pure rules (``loadgen.load.failing``), no clock: the schedule, the rule, and what the process tells the coordinator.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.record import ErrorKind
from loadgen.load.failing import (
    BACKOFF_AFTER,
    BACKOFF_CAP_S,
    BACKOFF_FIRST_S,
    FAILING_AT_LEAST,
    FAILING_PER_SLOT,
    BackgroundFailures,
    SlotFailures,
    backoff_s,
    failed_for_good,
)
from loadgen.load.stages import FailedBackground

# --- the pause -----------------------------------------------------------------------------------------


def test_the_pause_starts_at_the_third_failure_in_a_row_and_doubles_to_its_cap() -> None:
    assert [backoff_s(n) for n in range(11)] == [0.0, 0.0, 0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    assert BACKOFF_AFTER == 3 and BACKOFF_FIRST_S == 0.05 and BACKOFF_CAP_S == 2.0


@given(n=st.integers(min_value=0, max_value=10_000))
def test_the_pause_grows_with_failures_and_stays_under_its_cap(n: int) -> None:
    assert 0.0 <= backoff_s(n) <= backoff_s(n + 1) <= BACKOFF_CAP_S
    assert (backoff_s(n) == 0.0) == (n < BACKOFF_AFTER)


@given(n=st.integers(min_value=1, max_value=10_000))
def test_a_refusing_endpoint_sees_a_bounded_rate(n: int) -> None:
    """A slot whose every request fails at once sends its ``n``-th request after the pauses before it: at most
    8 requests in its first 1.55 s and one every ``BACKOFF_CAP_S`` after (at level 8: 4 a second)."""
    sent_at = sum(backoff_s(k) for k in range(n))  # the n-th request follows n - 1 failures
    assert n <= 8 + sent_at / BACKOFF_CAP_S


HTTP: ErrorKind = "http_status"


def test_a_success_ends_the_pause_and_a_new_run_of_failures_starts_again() -> None:
    slot = SlotFailures()
    starts = [slot.ended(HTTP, f"HTTP 400: no {i}") for i in range(5)]
    assert starts == [False, False, True, False, False]  # pausing starts once, at the third failure in a row
    assert (slot.in_a_row, slot.pause_s, slot.first_message) == (5, backoff_s(5), "HTTP 400: no 0")
    assert slot.ended(None, None) is False
    assert (slot.in_a_row, slot.pause_s, slot.first_message) == (0, 0.0, None)
    slot.ended("connection", "ConnectionRefusedError: refused")
    slot.ended("timeout", "read timeout")
    assert slot.first_message == "ConnectionRefusedError: refused" and slot.pause_s == 0.0  # two go again at once
    slot.ended("connection", "refused again")
    assert slot.pause_s == BACKOFF_FIRST_S  # an endpoint that is down is not flooded either


def test_a_cancelled_request_is_neither_a_failure_nor_a_success() -> None:
    slot = SlotFailures()
    for _ in range(4):
        slot.ended(HTTP, "HTTP 400: no")
    assert slot.ended("cancelled", "request cut off by the end of its user") is False
    assert slot.in_a_row == 4 and slot.first_message == "HTTP 400: no"
    failures = BackgroundFailures()
    assert not any(failures.ended(1, "cancelled", "cut", slots=1) for _ in range(100))
    assert failures.stages == {}


# --- failed for good -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("refused", "ok", "requests", "slots", "failed"),
    [
        (7, 0, 7, 1, False),  # fewer than FAILING_AT_LEAST in all
        (8, 0, 8, 1, True),
        (31, 0, 31, 8, False),  # fewer than FAILING_PER_SLOT per slot
        (32, 0, 32, 8, True),
        (32, 3, 35, 8, True),  # 3 of 35 ok: under a tenth
        (32, 4, 36, 8, False),  # 4 of 36 ok: a tenth or more, the level measures something
        (32, 0, 400, 8, True),  # the other 368 failed unanswered: nothing ok
        (1000, 200, 1200, 8, False),
    ],
)
def test_the_rule(refused: int, ok: int, requests: int, slots: int, failed: bool) -> None:
    assert failed_for_good(refused, ok, requests, slots) is failed


@given(
    refused=st.integers(min_value=0, max_value=10_000),
    unanswered=st.integers(min_value=0, max_value=10_000),
    ok=st.integers(min_value=0, max_value=10_000),
    slots=st.integers(min_value=0, max_value=1_000),
)
def test_the_rule_needs_many_refusals_and_few_successes(refused: int, unanswered: int, ok: int, slots: int) -> None:
    requests = refused + unanswered + ok
    if failed_for_good(refused, ok, requests, slots):
        assert refused >= max(FAILING_AT_LEAST, FAILING_PER_SLOT * slots)
        assert ok * 10 < requests
        assert failed_for_good(refused + 1, ok, requests + 1, slots)  # more refusals never undo it
    if refused >= max(FAILING_AT_LEAST, FAILING_PER_SLOT * slots) and ok == 0:
        assert failed_for_good(refused, ok, requests, slots)
    assert not failed_for_good(0, ok, requests, slots)  # an endpoint that does not answer never ends a level


def test_a_stage_fails_for_good_once_and_is_reported_with_its_first_refusal() -> None:
    failures = BackgroundFailures()
    assert failures.report() is None
    assert failures.ended(3, "timeout", "read timeout", slots=2) is False  # a failure, not a refusal
    for i in range(FAILING_PER_SLOT * 2 - 1):
        assert failures.ended(3, HTTP, f"HTTP 400: line one\n  line {i}", slots=2) is False
    assert failures.ended(2, None, None, slots=2) is False  # another stage's request counts for that stage
    assert failures.ended(3, "stream_error", "out of KV blocks", slots=2) is True
    assert failures.ended(3, HTTP, "HTTP 400: again", slots=2) is False  # said once per stage
    assert failures.report() == FailedBackground(3, 10, 10, "HTTP 400: line one line 0")
    assert FailedBackground.from_msg(failures.report().to_msg()) == failures.report()  # type: ignore[union-attr]


def test_an_endpoint_that_does_not_answer_pauses_its_slots_but_ends_no_level() -> None:
    """A dead endpoint fails the canaries too (the run's ``endpoint_failed``): ending its levels first would hide
    that behind canaries never sent."""
    failures = BackgroundFailures()
    kinds: tuple[ErrorKind, ...] = ("connection", "timeout", "truncated_stream")
    for kind in kinds * 100:
        assert failures.ended(4, kind, "gone", slots=1) is False
    assert failures.failed_stage is None and failures.report() is None


def test_successes_in_the_stage_keep_its_background_going() -> None:
    failures = BackgroundFailures()
    for _ in range(4):
        failures.ended(5, None, None, slots=1)
    assert not any(failures.ended(5, HTTP, "HTTP 429: slow down", slots=1) for _ in range(36))  # 4 of 40 ok
    assert failures.ended(5, HTTP, "HTTP 429: slow down", slots=1)  # 4 of 41: under a tenth
    assert failures.failed_stage == 5
