"""Stage coordination between the process that owns the shape and the processes that run users.

Why: in a distributed run the shape and the stage tracker live on the Locust master while the
canary and background users live on workers; they agree through small msgpack-safe messages
(stage snapshots one way; in-flight counts and canary completions the other). A local run uses
the same code, with Locust's local runner looping messages back in-process, so there is one path.

Pure: no Locust, no clocks of its own (callers pass ``now``), no I/O. Payloads are plain dicts.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

from loadgen.core.claims import supports
from loadgen.core.record import Phase
from loadgen.load.stages import EarlyEnd, FailedBackground, StageTracker, Ticket

REPORT_STALE_S = 2.0  # a worker whose last in-flight report is older than this is not counted


@dataclass(frozen=True, slots=True)
class StageSnapshot:
    index: int
    phase: Phase | None
    level: int | None
    quota: int
    completed: int
    ready: bool
    burst: bool = False
    held: bool = False  # every worker's last fresh report: all background slots of the level hold a started request
    # background slots holding a started request, summed over every worker's last fresh report: a canary record's
    # ``background_held_at_send`` in a distributed run (a worker alone sees only its own share of the level)
    held_slots: int = 0

    @property
    def finished(self) -> bool:
        return self.phase is None

    def to_msg(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_msg(cls, data: dict[str, Any]) -> StageSnapshot:
        return cls(**data)


class Coordinator:
    """Owns the tracker (master or local process); folds user-side reports into stage snapshots."""

    def __init__(self, tracker: StageTracker) -> None:
        self.tracker = tracker
        self.reports: dict[str, tuple[int, int, float]] = {}  # worker -> (background users, slots held, at)
        self.held = False
        self.held_slots = 0

    def snapshot(self) -> StageSnapshot:
        t = self.tracker
        stage = t.current
        if stage is None:
            return StageSnapshot(t.index, None, None, 0, 0, False)
        return StageSnapshot(
            t.index,
            stage.phase,
            stage.level,
            stage.quota,
            t.completed,
            t.ready,
            stage.burst,
            self.held,
            self.held_slots,
        )

    def on_inflight(
        self, worker: str, users: int, held: int, now: float, failed: FailedBackground | None = None
    ) -> bool:
        """Record one worker's counts (background users, slots holding a started request) and its word that a
        stage's background failed for good, which ends that stage when it is the current sweep stage; True when
        the stage just became ready or ended, or the level's held state changed, or its held slots changed while
        the level is not held (publish a snapshot: once held, every count is at least the level, and a canary
        sent then says so without a message per hand-over)."""
        self.reports[worker] = (users, held, now)
        ended = failed is not None and self.tracker.end_by_background(failed)
        was, slots = self.held, self.held_slots
        self._update_held(now)
        return self._check_ready(now) or was != self.held or ended or (not self.held and slots != self.held_slots)

    def on_done(self, stage_index: int, now: float, stop: EarlyEnd | None = None) -> None:
        """Count a finished canary; ``stop`` (``claim_stop``'s answer) also ends its stage early."""
        self.tracker.complete(stage_index)
        if stop is not None:
            self.tracker.end_early(stage_index, stop)
        self._update_held(now)  # the stage may have moved on: held is about its level
        self._check_ready(now)

    def forget(self, worker: str) -> None:
        self.reports.pop(worker, None)

    def _fresh(self, now: float) -> tuple[int, int] | None:
        fresh = [(u, h) for u, h, at in self.reports.values() if now - at <= REPORT_STALE_S]
        if not fresh:
            return None
        return sum(u for u, _ in fresh), sum(h for _, h in fresh)

    def _update_held(self, now: float) -> None:
        stage, counts = self.tracker.current, self._fresh(now)
        self.held = stage is not None and counts is not None and counts[0] == stage.background <= counts[1]
        self.held_slots = 0 if counts is None else counts[1]

    def _check_ready(self, now: float) -> bool:
        if self.tracker.ready or self.tracker.finished:
            return False
        counts = self._fresh(now)
        return counts is not None and self.tracker.check_ready(now, *counts)


def claim_stop(
    max_rate: float | None, per_canary: int, *, phase: str, level: int | None, canary: str, diverged: int | None
) -> EarlyEnd | None:
    """Why a sweep level must end now under the claim rule, or None: ``diverged`` completions of ``canary`` at
    ``level`` (the live table's count against the baseline reference) are more than even ``per_canary`` clean
    completions could outweigh, so "rate < ``max_rate`` at 95%" can no longer hold there."""
    if max_rate is None or phase != "sweep" or not diverged or supports(diverged, per_canary, max_rate):
        return None
    return EarlyEnd(
        canary,
        diverged,
        f"canary {canary!r} diverged from the baseline reference at level {level}: "
        f"'divergence rate < {max_rate:g} at 95%' cannot hold there with {per_canary} canaries",
    )


class Mirror:
    """The user side's copy of the stage; hands the canary user at most one ticket at a time."""

    def __init__(self, n_canaries: int, *, burst_mix_seed: int | None = None) -> None:
        self.n_canaries = n_canaries
        # None: a burst holds the same number of copies of each canary; else each copy's canary is drawn at
        # random, from this seed and the stage's index (the same scenario fires the same mixes)
        self.burst_mix_seed = burst_mix_seed
        self.snapshot: StageSnapshot | None = None
        self.outstanding: Ticket | None = None
        self.burst_taken: int | None = None  # stage index whose burst was handed out

    def update(self, snap: StageSnapshot) -> None:
        self.snapshot = snap
        held = self.outstanding
        if held is not None and (snap.index != held.stage_index or snap.completed > held.seq):
            self.outstanding = None  # the coordinator has counted it

    @property
    def finished(self) -> bool:
        return self.snapshot is not None and self.snapshot.finished

    def take_burst(self) -> list[Ticket]:
        """Every remaining ticket of a burst stage at once (each canary copy goes out concurrently), once."""
        snap = self.snapshot
        if snap is None or not snap.burst or snap.phase is None or snap.level is None or not snap.ready:
            return []
        if self.burst_taken == snap.index:
            return []
        self.burst_taken = snap.index
        n = self.n_canaries
        if self.burst_mix_seed is None:
            pick = [seq % n for seq in range(snap.quota)]
        else:
            rng = random.Random(f"{self.burst_mix_seed}:{snap.index}")
            pick = [rng.randrange(n) for _ in range(snap.quota)]
        return [Ticket(snap.index, snap.phase, snap.level, pick[seq], seq) for seq in range(snap.completed, snap.quota)]

    def take_ticket(self) -> Ticket | None:
        snap = self.snapshot
        if snap is None or snap.phase is None or snap.level is None or not snap.ready or self.outstanding:
            return None
        if snap.burst:
            return None
        if snap.completed >= snap.quota:
            return None
        ticket = Ticket(snap.index, snap.phase, snap.level, snap.completed % self.n_canaries, snap.completed)
        self.outstanding = ticket
        return ticket

    def moved_on(self, ticket: Ticket) -> bool:
        """The stage ``ticket`` was taken in is over (ended early: its background failed for good): a canary still
        waiting for that level must not go out."""
        snap = self.snapshot
        return snap is None or snap.index != ticket.stage_index

    def release(self) -> None:
        """The canary user died with a ticket out (its worker is stopping): let another user take it."""
        self.outstanding = None
