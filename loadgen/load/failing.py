"""Background that fails: the pause before a slot's next request, and when a level's background has failed for good.

Why: a background request the endpoint refuses (HTTP 400 for a prompt longer than its context, 401, 429) ends
at once, and a slot that keeps one request in flight would send the next at once: a thousand requests a second,
which gets an API key rate-limited, while the level's canaries run alone. So (docs/design.md, "Failing
background"):

- a slot whose last ``BACKOFF_AFTER`` or more requests failed in a row waits before its next one
  (``backoff_s``): ``BACKOFF_FIRST_S``, doubling with each further failure, at most ``BACKOFF_CAP_S``; a success
  ends the pause. One or two failures in a row are sent again at once, as before: a pause after every stray
  error would empty the slots of an endpoint that fails now and then, and the level with them. A ``cancelled``
  request (its user stopped: the end of a run, a level scaled down) is neither a failure nor a success;
- a sweep stage's background has failed for good (``failed_for_good``) once this process's requests sent in that
  stage ended in at least ``FAILING_PER_SLOT`` refusals per background slot of the process, and
  ``FAILING_AT_LEAST`` in all, with fewer than ``FAILING_OK_SHARE`` of them ok: the process stops that stage's
  background and tells the coordinator, which ends the level (the manifest's ``levels_ended_by_background``).
  A refusal is a failure the endpoint answered (``REFUSALS``: an error status, an error inside the stream, an
  answer that cannot be read or is too large): it is alive, and refuses the background, while the canaries,
  alone, may be answered. A failure it did not answer (no connection, a timeout, a stream cut) is the endpoint
  failing, which the canaries show too (the run's ``endpoint_failed`` status): it pauses a slot, never ends a
  level.

Pure: integers and strings in, no clock, no gevent, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from loadgen.core.errors import one_line
from loadgen.core.record import ErrorKind
from loadgen.load.stages import FailedBackground

BACKOFF_AFTER: Final = 3  # failures in a row before a slot pauses: one or two are sent again at once
BACKOFF_FIRST_S: Final = 0.05
BACKOFF_CAP_S: Final = 2.0
FAILING_PER_SLOT: Final = 4  # a stage's failures per background slot of the process, at least ...
FAILING_AT_LEAST: Final = 8  # ... and this many in all, ...
FAILING_OK_SHARE: Final = 0.1  # ... with fewer than this share of its finished background requests ok
# failures the endpoint answered (loadgen.core.record's error kinds): only these can end a level
REFUSALS: Final[frozenset[ErrorKind]] = frozenset(
    {"http_status", "stream_error", "malformed_body", "response_too_large"}
)
CANCELLED: Final[ErrorKind] = "cancelled"  # the request's user was stopped: neither a failure nor a success


def backoff_s(failures_in_a_row: int) -> float:
    """The pause before a slot's next request after ``failures_in_a_row`` failed requests in a row."""
    if failures_in_a_row < BACKOFF_AFTER:
        return 0.0
    return float(min(BACKOFF_FIRST_S * 2 ** min(failures_in_a_row - BACKOFF_AFTER, 16), BACKOFF_CAP_S))


def failed_for_good(refused: int, ok: int, requests: int, slots: int) -> bool:
    """A stage's background in one process has failed for good: ``refused`` refusals and ``ok`` successes among
    its ``requests`` that ended (cancelled ones left out), with ``slots`` background slots in the process."""
    enough = refused >= max(FAILING_AT_LEAST, FAILING_PER_SLOT * slots)
    return enough and ok < FAILING_OK_SHARE * requests


class SlotFailures:
    """One slot's failures in a row, and so its pause before the next request."""

    __slots__ = ("first_message", "in_a_row")

    def __init__(self) -> None:
        self.in_a_row = 0
        self.first_message: str | None = None  # the first failure's message of the current run of failures

    def ended(self, error_kind: ErrorKind | None, message: str | None) -> bool:
        """Count one request that ended (``error_kind`` None: ok); True when it makes the slot start pausing."""
        if error_kind is None:
            if self.in_a_row:
                self.in_a_row, self.first_message = 0, None
            return False
        if error_kind == CANCELLED:
            return False
        if self.in_a_row == 0:
            self.first_message = message
        self.in_a_row += 1
        return self.in_a_row == BACKOFF_AFTER

    @property
    def pause_s(self) -> float:
        return backoff_s(self.in_a_row)


@dataclass
class StageCounts:
    """One sweep stage's background in this process: requests that ended (cancelled ones left out), of them ok,
    failed and refused (failures the endpoint answered), and the first refusal's message on one line."""

    requests: int = 0
    ok: int = 0
    errors: int = 0
    refused: int = 0
    first_error: str | None = None


@dataclass
class BackgroundFailures:
    """This process's background per sweep stage (by the stage index a request was sent in), and the stage whose
    background has failed for good, if any: its slots send nothing more while it lasts."""

    stages: dict[int, StageCounts] = field(default_factory=dict)
    failed_stage: int | None = None

    def ended(self, stage: int, error_kind: ErrorKind | None, message: str | None, slots: int) -> bool:
        """Count one background request sent in ``stage`` that ended (``error_kind`` None: ok); True when it makes
        that stage's background fail for good (once per stage)."""
        if error_kind == CANCELLED:
            return False
        counts = self.stages.get(stage)
        if counts is None:
            counts = self.stages[stage] = StageCounts()
        counts.requests += 1
        if error_kind is None:  # the hot path: a success never makes a stage fail
            counts.ok += 1
            return False
        counts.errors += 1
        if error_kind in REFUSALS:
            counts.refused += 1
            if counts.first_error is None:
                counts.first_error = one_line(message) or "no message"
        if self.failed_stage == stage or not failed_for_good(counts.refused, counts.ok, counts.requests, slots):
            return False
        self.failed_stage = stage
        return True

    def report(self) -> FailedBackground | None:
        """The word for the coordinator (``lg_inflight``) while a stage's background has failed for good."""
        stage = self.failed_stage
        if stage is None:
            return None
        counts = self.stages[stage]
        return FailedBackground(stage, counts.errors, counts.requests, counts.first_error or "")


def backoff_notice(in_a_row: int, first_message: str | None) -> str:
    """The notice a process gives the first time one of its background slots pauses after failures."""
    first = one_line(first_message) or "no message"
    return (
        f"Background requests failed {in_a_row} in a row (the first: {first}), so each "
        f"background user whose requests fail now waits before its next one, {BACKOFF_FIRST_S:g} s doubling up "
        f"to {BACKOFF_CAP_S:g} s, until one succeeds; a level whose background fails for good is ended early "
        "(the manifest's levels_ended_by_background). The canaries of a level whose background fails share the "
        "engine with fewer requests than the level says."
    )
