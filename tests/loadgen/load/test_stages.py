from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.scenario import Sweep
from loadgen.load.stages import Stage, StageTracker, build_stages, users_for


def test_build_stages_orders_warmup_baseline_then_levels() -> None:
    stages = build_stages(Sweep(levels=[0, 4, 16], canaries_per_level=3, warmup=1, baseline=2), n_canaries=2)
    assert stages == [
        Stage("warmup", 0, 2),
        Stage("baseline", 0, 4),
        Stage("sweep", 0, 6),
        Stage("sweep", 4, 6),
        Stage("sweep", 16, 6),
    ]


def test_users_for_adds_canary_users_and_ends_with_none() -> None:
    assert users_for(Stage("sweep", 16, 5), canary_users=1) == 17
    assert users_for(None, canary_users=1) is None


def test_ready_only_when_all_background_users_are_busy() -> None:
    t = StageTracker([Stage("sweep", 4, 2)], settle_timeout_s=10)
    assert not t.check_ready(0.0, background_users=3, background_held=3)
    assert not t.check_ready(1.0, background_users=4, background_held=2)
    assert not t.check_ready(1.0, background_users=5, background_held=5)  # scaling down from a higher level
    assert t.check_ready(1.5, background_users=4, background_held=4)
    assert t.unsettled_levels == []


def test_settle_timeout_marks_level_unsettled() -> None:
    t = StageTracker([Stage("sweep", 4, 1)], settle_timeout_s=2)
    assert not t.check_ready(0.0, 4, 1)
    assert t.check_ready(2.5, 4, 1)
    assert t.unsettled_levels == [4]


def test_completion_advances_and_late_reports_are_ignored() -> None:
    t = StageTracker([Stage("baseline", 0, 2), Stage("sweep", 1, 1)], settle_timeout_s=1)
    t.check_ready(0, 0, 0)
    t.complete(0)
    assert t.current == Stage("baseline", 0, 2) and t.completed == 1
    t.complete(0)
    assert t.current == Stage("sweep", 1, 1) and not t.ready and t.completed == 0
    t.complete(0)  # late report for the closed stage
    assert t.completed == 0
    t.complete(1)
    assert t.finished
    t.complete(1)
    assert t.finished


@given(
    levels=st.lists(st.integers(0, 64), min_size=1, max_size=6, unique=True),
    per_level=st.integers(1, 5),
    n_canaries=st.integers(1, 3),
)
def test_every_stage_gets_exactly_its_quota(levels: list[int], per_level: int, n_canaries: int) -> None:
    stages = build_stages(Sweep(levels=levels, canaries_per_level=per_level, warmup=0, baseline=1), n_canaries)
    t = StageTracker(stages, settle_timeout_s=1)
    done = [0] * len(stages)
    while not t.finished:
        done[t.index] += 1
        t.complete(t.index)
    assert done == [s.quota for s in stages]


def test_burst_stage_comes_last_and_holds_no_background() -> None:
    stages = build_stages(Sweep(levels=[0, 4], canaries_per_level=2, warmup=0, baseline=1, burst=[100]), n_canaries=2)
    assert stages[-1] == Stage("sweep", 200, 200, burst=True)
    assert users_for(stages[-1], canary_users=1) == 1


def test_a_burst_may_not_fire_as_many_requests_as_a_level() -> None:
    import pytest

    from loadgen.core.errors import ScenarioError
    from loadgen.core.scenario import parse_scenario

    canary = {"id": "a", "prompt": "x"}
    with pytest.raises(ScenarioError, match=r"sweep: burst 4 \(4 copies at once\) equals level 4"):
        parse_scenario({"canaries": [canary], "sweep": {"levels": [0, 4], "burst": 4}}, "s.toml")
    two = [canary, {"id": "b", "prompt": "y"}]
    with pytest.raises(ScenarioError, match=r"burst 2 \(2 copies of each of 2 canaries at once\) equals level 4"):
        parse_scenario({"canaries": two, "sweep": {"levels": [0, 4], "burst": [3, 2]}}, "s.toml")
    assert parse_scenario({"canaries": two, "sweep": {"levels": [0, 3], "burst": 3}}, "s.toml").sweep.burst == [3]
    with pytest.raises(ScenarioError, match="burst 5001 fires 10002 requests at once"):
        parse_scenario({"canaries": two, "sweep": {"burst": 5001}}, "s.toml")


def test_a_list_of_burst_sizes_is_one_stage_each_in_the_order_given() -> None:
    sweep = Sweep(levels=[0, 4], canaries_per_level=1, warmup=0, baseline=0, burst=[8, 2])
    # reported at every request a burst fires at once: its copies of each canary together
    assert build_stages(sweep, n_canaries=3)[-2:] == [
        Stage("sweep", 24, 24, burst=True),
        Stage("sweep", 6, 6, burst=True),
    ]
    # a scenario file may give one number: 0 is none
    assert Sweep.model_validate({"burst": 0}).burst == [] and Sweep.model_validate({"burst": 5}).burst == [5]


def test_burst_sizes_are_distinct_and_positive() -> None:
    import pytest
    from pydantic import ValidationError

    for sizes, why in (([2, 2], "distinct"), ([0, 3], "0 copies")):
        with pytest.raises(ValidationError, match=why):
            Sweep(levels=[0, 4], burst=sizes)
