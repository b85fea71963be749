"""The run's stage arithmetic: warm-up, baseline, then one stage per concurrency level.

Pure: no Locust, no clocks of its own (callers pass ``now``). The shape asks how many users to
hold for the current stage; a stage ends when its canary quota has completed (not on a timer), so
every level gets exactly its canaries whatever the endpoint's speed, or earlier for a sweep level that
cannot be what it says: the claim rule (``EarlyEnd``) or a background that failed for good
(``FailedBackground``, docs/design.md "Failing background"). ``loadgen.load.coordination`` carries the
tracker's state to the processes that run users.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from loadgen.core.manifest import EndedByBackground
from loadgen.core.record import Phase
from loadgen.core.scenario import Sweep


@dataclass(frozen=True, slots=True)
class Stage:
    phase: Phase
    level: int  # the concurrency this stage is reported under
    quota: int  # canary requests to complete in this stage
    burst: bool = False  # the quota is fired at once, with no background: level = copies in flight

    @property
    def background(self) -> int:
        """Background users to hold."""
        return 0 if self.burst else self.level


@dataclass(frozen=True, slots=True)
class Ticket:
    stage_index: int
    phase: Phase
    level: int
    canary_index: int  # which of the scenario's canaries to send
    seq: int  # 0-based position of this canary within its stage


def build_stages(sweep: Sweep, n_canaries: int) -> list[Stage]:
    """Warm-up and baseline run at level 0 with no background; each level sends every canary N times."""
    stages: list[Stage] = []
    if sweep.warmup:
        stages.append(Stage("warmup", 0, sweep.warmup * n_canaries))
    if sweep.baseline:
        stages.append(Stage("baseline", 0, sweep.baseline * n_canaries))
    stages.extend(Stage("sweep", level, sweep.canaries_per_level * n_canaries) for level in sweep.levels)
    # a burst's level is every request it fires at once: its size in copies of each canary, times the canaries
    stages.extend(Stage("sweep", size * n_canaries, size * n_canaries, burst=True) for size in sweep.burst)
    return stages


def users_for(stage: Stage | None, canary_users: int) -> int | None:
    """Total users the shape should hold for ``stage``; None ends the test."""
    return None if stage is None else stage.background + canary_users


@dataclass(frozen=True)
class EarlyEnd:
    """Why a sweep stage ends before its quota (the claim rule, ``coordination.claim_stop``)."""

    canary: str
    diverged: int
    reason: str


@dataclass(frozen=True)
class FailedBackground:
    """A user-side process's word that a sweep stage's background failed for good (``loadgen.load.failing``):
    its requests sent in that stage that failed, all of them that ended (cancelled ones left out), and the first
    refused one's message (a failure the endpoint answered) on one line. Travels in ``lg_inflight`` as a plain
    dict."""

    stage: int
    background_errors: int
    background_requests: int
    first_error: str

    def to_msg(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_msg(cls, data: dict[str, Any] | None) -> FailedBackground | None:
        return None if data is None else cls(**data)


class StageTracker:
    """Which stage the run is in, how many of its canaries completed, and whether it may send."""

    def __init__(self, stages: list[Stage], settle_timeout_s: float, *, held_first: bool = True) -> None:
        self.stages = stages
        self.settle_timeout_s = settle_timeout_s
        # False: background aimed at one phase of the canary (background.phase) holds nothing before a canary goes,
        # so a stage is ready once its background users exist (the canary user's phase gate waits for the rest)
        self.held_first = held_first
        self.index = 0
        self.completed = 0
        self.stage_started_at: float | None = None
        self.ready = False
        self.unsettled_levels: list[int] = []  # levels whose canaries went out before all users were busy
        self.ended_early: list[dict[str, Any]] = []  # levels the claim rule ended before their quota (why, when)
        self.ended_by_background: list[EndedByBackground] = []  # levels whose background failed for good

    @property
    def current(self) -> Stage | None:
        return self.stages[self.index] if self.index < len(self.stages) else None

    @property
    def finished(self) -> bool:
        return self.current is None

    def check_ready(self, now: float, background_users: int, background_held: int) -> bool:
        """A stage may send once its background users all exist and each holds a request the server started (only
        the first where ``held_first`` is False)."""
        stage = self.current
        if stage is None:
            return False
        if self.ready:
            return True
        if self.stage_started_at is None:
            self.stage_started_at = now
        want = stage.background
        if background_users == want and (background_held >= want or not self.held_first):
            self.ready = True
        elif now - self.stage_started_at >= self.settle_timeout_s and background_users >= want:
            self.ready = True
            self.unsettled_levels.append(stage.level)
        return self.ready

    def complete(self, stage_index: int) -> None:
        """Count a finished canary (ok or failed); the last one of a stage moves the run to the next."""
        if stage_index != self.index or self.current is None:
            return  # a late report for a stage already closed
        self.completed += 1
        if self.completed >= self.stages[self.index].quota:
            self._next()

    def end_early(self, stage_index: int, why: EarlyEnd) -> bool:
        """End the current sweep stage before its quota (the claim rule: ``coordination.claim_stop``), recording
        ``why`` with the level, the canaries completed and the quota; False for a stage already closed."""
        if not self._endable(stage_index):
            return False
        stage = self.stages[self.index]
        self.ended_early.append(
            {"level": stage.level, "completed": self.completed, "quota": stage.quota, **dataclasses.asdict(why)}
        )
        self._next()
        return True

    def end_by_background(self, why: FailedBackground) -> bool:
        """End the current sweep stage before its quota because its background failed for good, recording the
        level, the canaries completed, the quota and ``why``'s counts; False for a stage already closed (a
        report that came late, or again)."""
        if not self._endable(why.stage):
            return False
        stage = self.stages[self.index]
        self.ended_by_background.append(
            EndedByBackground(
                level=stage.level,
                completed=self.completed,
                quota=stage.quota,
                background_errors=why.background_errors,
                background_requests=why.background_requests,
                first_error=why.first_error,
            )
        )
        self._next()
        return True

    def _endable(self, stage_index: int) -> bool:
        """A sweep stage may end early only while it is the current one (never a burst: it has no background)."""
        stage = self.current
        return stage_index == self.index and stage is not None and stage.phase == "sweep" and not stage.burst

    def _next(self) -> None:
        self.index += 1
        self.completed = 0
        self.ready = False
        self.stage_started_at = None
