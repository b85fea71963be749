"""Where a run stands, computed from its canary records: per stage, canaries done of the quota, errors,
unique completions and divergences so far, and an estimate of the time left.

Why: the CLI shows a run's progress while Locust runs in another process, without a channel into it:
it follows the records the run writes anyway (``loadgen/cli/progress/follow.py``) and folds them
here. The stages are the load side's own plan (``loadgen.load.stages.build_stages``) and identity and
divergence are the report's rules through the web UI's live table (``loadgen.load.live``, built on
``reports.analysis.identity``), so these figures and the report agree; the final report is the authority.
Pure: records in, a snapshot out; no I/O, no clock of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from loadgen.core.record import CanaryRecord, Phase
from loadgen.core.scenario import Scenario
from loadgen.load.live import LiveTable, summarise
from loadgen.load.stages import Stage, build_stages

_PHASE_ORDER = {"warmup": 0, "baseline": 1, "sweep": 2}


@dataclass(frozen=True)
class StageProgress:
    index: int  # 0-based position in the run plan
    phase: Phase
    level: int
    burst: bool
    quota: int  # canaries this stage asks for (per-stage count x canaries)
    done: int  # canaries that came back, ok or failed
    errors: int
    # distinct completions of the canary with the most (counted per canary, never summed across canaries: two
    # canaries that each always gave one answer are 1, not 2); None for the warm-up (counted nowhere)
    unique: int | None
    diverged: int | None  # completions unlike the baseline reference; None with no reference (yet)
    # "held at send": background slots the stage's last canary found held, over every process, if recorded
    held: int | None


@dataclass(frozen=True)
class Snapshot:
    stages: tuple[StageProgress, ...]
    current: int | None  # index of the stage in progress; None once every stage is done
    done: int
    quota: int
    errors: int
    seconds_left: float | None  # None until a canary has come back
    unplanned: int  # records that belong to no stage of the plan (never expected; shown, not hidden)
    # the time left is a floor: stages to come run at a level above the one whose pace it was measured at (a
    # busier engine answers each canary more slowly), so the run takes at least this long, likely longer
    left_at_least: bool = False
    buffered: bool = False  # a canary's process found its streamed background coming in one piece


class RunProgress:
    """Folds canary records into per-stage progress. Records may come in any batches, in any order within a
    batch; a sweep record must not come in a batch before the baseline records sent before it (true of
    records read from the run folder: a stage starts only once the previous one completed)."""

    def __init__(self, scenario: Scenario) -> None:
        self.plan: list[Stage] = build_stages(scenario.sweep, len(scenario.canaries))
        self._where = {(s.phase, s.level, s.burst): i for i, s in enumerate(self.plan)}
        n = len(self.plan)
        self.done = [0] * n
        self.errors = [0] * n
        self.held: list[int | None] = [None] * n
        self._first_sent: list[float | None] = [None] * n
        self._last_end: list[float | None] = [None] * n
        self.canaries = [c.id for c in scenario.canaries]
        self.table = LiveTable()
        self.has_baseline = scenario.sweep.baseline > 0
        self.unplanned = 0
        self.buffered = False

    def add(self, records: Iterable[CanaryRecord]) -> None:
        for r in sorted(records, key=lambda r: (_PHASE_ORDER.get(r.phase, 3), r.sent_at, r.request_id)):
            self._add(r)

    def _add(self, r: CanaryRecord) -> None:
        i = self._where.get((r.phase, 0 if r.phase != "sweep" else r.level, r.burst and r.phase == "sweep"))
        if i is None:
            self.unplanned += 1
            return
        self.done[i] += 1
        self.errors[i] += r.status != "ok"
        if r.background_held_at_send is not None:
            self.held[i] = r.background_held_at_send
        self.buffered = self.buffered or bool(r.background_buffered)
        end = r.sent_at + (r.latency_s or 0.0)
        first, last = self._first_sent[i], self._last_end[i]
        self._first_sent[i] = r.sent_at if first is None else min(first, r.sent_at)
        self._last_end[i] = end if last is None else max(last, end)
        if r.phase == "sweep" and r.canary_id not in self.table.references:
            self.table.choose_references()  # the baseline is in: its stage completed before any sweep canary went
        self.table.add(
            summarise(
                canary=r.canary_id,
                stage=i,
                phase=r.phase,
                level=r.level,
                status=r.status,
                token_ids=r.token_ids,
                tokens=r.tokens,
                text=r.text,
                reference=self.table.references.get(r.canary_id),
            )
        )

    def current(self) -> int | None:
        """The stage in progress: the last one with records, or the next when that one met its quota."""
        started = [i for i, d in enumerate(self.done) if d]
        if not started:
            return 0 if self.plan else None
        last = started[-1]
        if self.done[last] < self.plan[last].quota:
            return last
        return last + 1 if last + 1 < len(self.plan) else None

    def _seconds_per_canary(self, current: int) -> tuple[float, int] | None:
        """Mean time per canary in the current stage, else in the latest stage before it with records; and the
        stage it was measured in."""
        for i in range(current, -1, -1):
            first, last = self._first_sent[i], self._last_end[i]
            if self.done[i] and first is not None and last is not None:
                return max(last - first, 0.0) / self.done[i], i
        return None

    def _figures(self, stage: Stage) -> tuple[int | None, int | None]:
        if stage.phase == "warmup":
            return None, None
        key = "baseline" if stage.phase == "baseline" else str(stage.level)
        rows = [row for row in self.table.rows() if row["level"] == key]
        unique = max((int(row["unique"]) for row in rows), default=0)
        if stage.phase == "baseline" or not self.has_baseline:
            return unique, None
        diverged = [self.table.diverged(c, stage.level) for c in self.canaries]
        if any(c not in self.table.references for c in self.canaries):
            return unique, None
        return unique, sum(d or 0 for d in diverged)

    def snapshot(self) -> Snapshot:
        current = self.current()
        stages = []
        for i, s in enumerate(self.plan):
            unique, diverged = self._figures(s) if self.done[i] else (None, None)
            done = self.done[i]
            stages.append(
                StageProgress(
                    i, s.phase, s.level, s.burst, s.quota, done, self.errors[i], unique, diverged, self.held[i]
                )
            )
        # a stage before the current one is complete even below its quota (the claim rule ended it early)
        left = (
            0
            if current is None
            else sum(max(s.quota - self.done[i], 0) for i, s in enumerate(self.plan[current:], current))
        )
        measured = None if current is None else self._seconds_per_canary(current)
        seconds_left = 0.0 if current is None else (None if measured is None else left * measured[0])
        at_least = (
            current is not None
            and measured is not None
            and any(s.level > self.plan[measured[1]].level for s in self.plan[current:])
        )
        return Snapshot(
            stages=tuple(stages),
            current=current,
            done=sum(self.done),
            quota=sum(s.quota for s in self.plan),
            errors=sum(self.errors),
            seconds_left=seconds_left,
            unplanned=self.unplanned,
            buffered=self.buffered,
            left_at_least=at_least,
        )
