"""The progress model against constructed runs: what it says at any point of a run equals what a plain
count of the records says, whatever batches the records were read in."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.cli.progress.model import RunProgress, Snapshot
from loadgen.cli.progress.text import progress_line, stage_figures, totals
from loadgen.core.record import CanaryRecord
from loadgen.core.scenario import Scenario, parse_scenario
from loadgen.load.stages import Stage, build_stages

COMPLETIONS = [(1, 2, 3), (1, 2, 4), (1, 5, 3), (7,)]


def scenario(canaries: int, levels: list[int], per_level: int, warmup: int, baseline: int, burst: int) -> Scenario:
    data: dict[str, Any] = {
        "name": "p",
        "endpoint": {"base_url": "http://127.0.0.1:9"},
        "canaries": [{"id": f"c{i}", "prompt": "x"} for i in range(canaries)],
        "sweep": {
            "levels": levels,
            "canaries_per_level": per_level,
            "warmup": warmup,
            "baseline": baseline,
            "burst": burst,
        },
    }
    return parse_scenario(data, "test")


def records_for(s: Scenario, picks: list[tuple[bool, int]]) -> list[CanaryRecord]:
    """The first ``len(picks)`` canaries of the run plan, in send order (canaries round-robin in a stage)."""
    out: list[CanaryRecord] = []
    plan = build_stages(s.sweep, len(s.canaries))
    slots = [(stage, seq) for stage in plan for seq in range(stage.quota)]
    for n, ((stage, seq), (ok, which)) in enumerate(zip(slots, picks, strict=False)):
        out.append(
            CanaryRecord(
                run_id="r",
                canary_id=s.canaries[seq % len(s.canaries)].id,
                request_id=f"{n:06d}",
                phase=stage.phase,
                level=stage.level,
                inflight_at_send=0,
                sent_at=1.7e9 + n,
                latency_s=0.5,
                status="ok" if ok else "error",
                error_kind=None if ok else "timeout",
                token_ids=list(COMPLETIONS[which]) if ok else None,
                burst=stage.burst,
                background_held_at_send=stage.background if stage.phase == "sweep" else None,
            )
        )
    return out


def expected(s: Scenario, records: list[CanaryRecord]) -> list[dict[str, Any]]:
    """Per stage, counted the plain way: done, errors, unique (per canary, the most of any), diverged from the modal
    baseline completion (earliest first on a tie)."""
    plan = build_stages(s.sweep, len(s.canaries))
    ids = [c.id for c in s.canaries]
    refs: dict[str, tuple[int, ...]] = {}
    for c in ids:
        base = [
            tuple(r.token_ids or ()) for r in records if r.phase == "baseline" and r.canary_id == c and r.status == "ok"
        ]
        if base:
            counts = Counter(base)
            refs[c] = max(counts, key=lambda comp: (counts[comp], -base.index(comp)))
    rows = []
    for stage in plan:
        mine = [r for r in records if (r.phase, r.level, r.burst) == (stage.phase, stage.level, stage.burst)]
        ok = [r for r in mine if r.status == "ok"]
        unique = max(len({tuple(r.token_ids or ()) for r in ok if r.canary_id == c}) for c in ids)
        diverged = None
        if stage.phase == "sweep" and s.sweep.baseline and all(c in refs for c in ids):
            diverged = sum(tuple(r.token_ids or ()) != refs[r.canary_id] for r in ok)
        rows.append(
            {
                "done": len(mine),
                "errors": len(mine) - len(ok),
                "unique": None if not mine or stage.phase == "warmup" else unique,
                "diverged": diverged if mine else None,
            }
        )
    return rows


def current_stage(plan: list[Stage], done: int) -> int | None:
    edge = 0
    for i, stage in enumerate(plan):
        edge += stage.quota
        if done < edge:
            return i
    return None


@st.composite
def runs(draw: st.DrawFn) -> tuple[Scenario, list[CanaryRecord], list[int]]:
    levels = draw(st.lists(st.integers(0, 8), min_size=1, max_size=3, unique=True))
    s = scenario(
        draw(st.integers(1, 2)),
        levels,
        draw(st.integers(1, 4)),
        draw(st.integers(0, 1)),
        draw(st.integers(0, 3)),
        draw(st.sampled_from([0, 9])),
    )
    total = sum(stage.quota for stage in build_stages(s.sweep, len(s.canaries)))
    k = draw(st.integers(0, total))
    picks = draw(st.lists(st.tuples(st.booleans(), st.integers(0, len(COMPLETIONS) - 1)), min_size=k, max_size=k))
    cuts = sorted(draw(st.lists(st.integers(0, k), max_size=4)))
    return s, records_for(s, picks), cuts


def fold(s: Scenario, records: list[CanaryRecord], cuts: list[int], seed: int) -> Snapshot:
    """Feed the records in the batches ``cuts`` makes, each batch shuffled (files read in any order)."""
    model = RunProgress(s)
    shuffle = random.Random(seed).shuffle
    for lo, hi in zip([0, *cuts], [*cuts, len(records)], strict=True):
        batch = records[lo:hi]
        shuffle(batch)
        model.add(batch)
    return model.snapshot()


@settings(max_examples=300, deadline=None)
@given(runs(), st.integers(0, 2**32))
def test_progress_equals_a_plain_count_of_the_records_in_any_batches(
    run: tuple[Scenario, list[CanaryRecord], list[int]], seed: int
) -> None:
    s, records, cuts = run
    snap = fold(s, records, cuts, seed)
    assert snap == fold(s, records, [], seed)  # how the records were batched changes nothing
    plan = build_stages(s.sweep, len(s.canaries))
    assert snap.quota == sum(stage.quota for stage in plan) and snap.done == len(records) and snap.unplanned == 0
    assert snap.current == current_stage(plan, len(records))
    for stage, want in zip(snap.stages, expected(s, records), strict=True):
        assert (stage.done, stage.errors, stage.unique, stage.diverged) == (
            want["done"],
            want["errors"],
            want["unique"],
            want["diverged"],
        )
        assert stage.done <= stage.quota
        assert stage.unique is None or stage.unique <= stage.done - stage.errors
        assert stage.diverged is None or stage.diverged <= stage.done - stage.errors
    if snap.current is None:
        assert snap.seconds_left == 0.0
    elif records:
        assert snap.seconds_left is not None and snap.seconds_left >= 0
    else:
        assert snap.seconds_left is None


def test_a_level_ended_early_counts_as_done_once_the_next_one_has_begun() -> None:
    s = scenario(1, [0, 4, 8], 5, 0, 1, 0)
    picks = [(True, 0)] * 3  # baseline, then two canaries at level 0
    records = records_for(s, picks)
    # level 4 ended by the claim rule after 2 of 5; level 8 has its first canary
    for n, level in enumerate([4, 4, 8]):
        records.append(
            CanaryRecord("r", "c0", f"x{n}", "sweep", level, 0, 1.8e9 + n, "ok", latency_s=0.5, token_ids=[1, 2, 4])
        )
    model = RunProgress(s)
    model.add(records[:3])
    snap = model.snapshot()
    assert snap.current == 1 and snap.stages[1].done == 2  # level 0 in progress
    model.add(records[3:])
    snap = model.snapshot()
    assert snap.current == 3 and snap.stages[2].done == 2 and snap.stages[2].diverged == 2
    assert snap.seconds_left == 4 * 0.5  # only the current stage is left: 4 canaries, 0.5 s each
    assert progress_line(snap, 65.0) == (
        "level 8 (stage 4 of 4): canaries 1/5, unique 1, diverged 1, errors 0; 6/16 canaries, 1:05 elapsed, "
        "about 0:02 left"
    )
    assert stage_figures(snap.stages[0]) == "canaries 1/1, unique 1, errors 0"


def test_records_outside_the_plan_are_counted_apart_never_as_progress() -> None:
    s = scenario(1, [0], 2, 0, 0, 0)
    stray = CanaryRecord("r", "c0", "a", "sweep", 7, 0, 1.7e9, "ok", token_ids=[1])
    model = RunProgress(s)
    model.add([stray])
    snap = model.snapshot()
    assert snap.unplanned == 1 and snap.done == 0 and snap.current == 0


def test_a_stage_s_done_count_holds_no_later_canary_and_the_time_left_is_a_floor_before_busier_levels() -> None:
    s = scenario(1, [0, 4], 2, 1, 2, 0)  # warm-up 1, baseline 2, level 0: 2, level 4: 2
    model = RunProgress(s)
    model.add(records_for(s, [(True, 0)] * 4))  # warm-up, baseline and level 0's first in one read
    snap = model.snapshot()
    assert totals(snap, 1.0, through=0).startswith("1/7 canaries, ")  # warm-up done: its own canary only
    assert totals(snap, 1.0, through=1).startswith("3/7 canaries, ")
    # paced at level 0, with level 4 to come: a floor, said as one
    assert snap.left_at_least and snap.seconds_left == 3 * 0.5
    assert totals(snap, 1.0).endswith("at least 0:02 left")
    model.add(records_for(s, [(True, 0)] * 6)[4:])  # level 4's first canary: paced at the busiest level now
    snap = model.snapshot()
    assert snap.current == 3 and not snap.left_at_least and totals(snap, 1.0).endswith("about 0:00 left")
