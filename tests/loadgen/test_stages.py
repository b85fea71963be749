from hypothesis import given
from hypothesis import strategies as st

from loadgen.scenario import Sweep
from loadgen.stages import Stage, StageTracker, build_stages, users_for


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


def test_tracker_waits_for_users_in_flight_before_issuing() -> None:
    t = StageTracker([Stage("sweep", 4, 2)], n_canaries=1, settle_timeout_s=10)
    assert not t.check_ready(0.0, background_users=3, background_inflight=3)
    assert t.take_ticket() is None
    assert not t.check_ready(1.0, background_users=4, background_inflight=2)
    assert t.check_ready(1.5, background_users=4, background_inflight=4)
    assert t.take_ticket() is not None


def test_tracker_settle_timeout_marks_level_unsettled() -> None:
    t = StageTracker([Stage("sweep", 4, 1)], n_canaries=1, settle_timeout_s=2)
    assert not t.check_ready(0.0, 4, 1)
    assert t.check_ready(2.5, 4, 1)
    assert t.unsettled_levels == [4]


def test_tracker_never_issues_more_than_quota_and_advances_on_completion() -> None:
    t = StageTracker([Stage("baseline", 0, 2), Stage("sweep", 1, 1)], n_canaries=2, settle_timeout_s=1)
    t.check_ready(0, 0, 0)
    a, b = t.take_ticket(), t.take_ticket()
    assert a is not None and b is not None
    assert (a.canary_index, b.canary_index) == (0, 1)
    assert t.take_ticket() is None
    t.complete(a)
    assert t.current == Stage("baseline", 0, 2)
    t.complete(b)
    assert t.current == Stage("sweep", 1, 1) and not t.ready
    t.check_ready(0, 1, 1)
    c = t.take_ticket()
    assert c is not None and c.level == 1 and c.phase == "sweep"
    t.complete(c)
    assert t.finished and t.take_ticket() is None


@given(
    levels=st.lists(st.integers(0, 64), min_size=1, max_size=6, unique=True),
    per_level=st.integers(1, 5),
    n_canaries=st.integers(1, 3),
)
def test_every_stage_gets_exactly_its_quota(levels: list[int], per_level: int, n_canaries: int) -> None:
    stages = build_stages(Sweep(levels=levels, canaries_per_level=per_level, warmup=0, baseline=1), n_canaries)
    t = StageTracker(stages, n_canaries, settle_timeout_s=1)
    sent: dict[int, int] = {}
    while not t.finished:
        stage = t.current
        assert stage is not None
        t.check_ready(0, stage.level, stage.level)
        ticket = t.take_ticket()
        assert ticket is not None
        sent[ticket.stage_index] = sent.get(ticket.stage_index, 0) + 1
        t.complete(ticket)
    assert [sent[i] for i in range(len(stages))] == [s.quota for s in stages]
