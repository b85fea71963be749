from hypothesis import given
from hypothesis import strategies as st

from loadgen.load.coordination import REPORT_STALE_S, Coordinator, Mirror, StageSnapshot
from loadgen.load.stages import Stage, StageTracker


def setup(stages: list[Stage], n_canaries: int = 1) -> tuple[Coordinator, Mirror]:
    coord = Coordinator(StageTracker(stages, settle_timeout_s=5))
    mirror = Mirror(n_canaries)
    mirror.update(coord.snapshot())
    return coord, mirror


def test_snapshot_round_trips_as_a_plain_dict() -> None:
    snap = StageSnapshot(2, "sweep", 4, 10, 3, True)
    assert StageSnapshot.from_msg(snap.to_msg()) == snap
    assert all(isinstance(v, (int, str, bool)) for v in snap.to_msg().values())


def test_readiness_sums_workers_and_ignores_stale_reports() -> None:
    coord, _ = setup([Stage("sweep", 4, 1)])
    assert not coord.on_inflight("a", 2, 2, now=0.0)
    assert coord.on_inflight("b", 2, 2, now=0.1)
    coord2, _ = setup([Stage("sweep", 4, 1)])
    coord2.on_inflight("a", 2, 2, now=0.0)
    assert not coord2.on_inflight("b", 2, 2, now=REPORT_STALE_S + 1)  # a's report is stale
    coord2.forget("b")
    assert coord2.reports.keys() == {"a"}


def test_mirror_issues_one_ticket_at_a_time_until_counted() -> None:
    coord, mirror = setup([Stage("baseline", 0, 2)], n_canaries=2)
    assert mirror.take_ticket() is None  # not ready yet
    coord.on_inflight("", 0, 0, now=0)
    mirror.update(coord.snapshot())
    t1 = mirror.take_ticket()
    assert t1 is not None and t1.canary_index == 0 and t1.phase == "baseline"
    assert mirror.take_ticket() is None  # outstanding
    coord.on_done(t1.stage_index, now=0.1)
    mirror.update(coord.snapshot())
    t2 = mirror.take_ticket()
    assert t2 is not None and t2.canary_index == 1 and t2.seq == 1
    coord.on_done(t2.stage_index, now=0.2)
    mirror.update(coord.snapshot())
    assert mirror.finished and mirror.take_ticket() is None


def test_released_ticket_is_issued_again() -> None:
    coord, mirror = setup([Stage("sweep", 0, 3)])
    coord.on_inflight("", 0, 0, now=0)
    mirror.update(coord.snapshot())
    t = mirror.take_ticket()
    assert t is not None
    mirror.release()  # the canary user died mid-request
    again = mirror.take_ticket()
    assert again is not None and again.seq == t.seq


@given(
    quotas=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    n_canaries=st.integers(1, 3),
    drops=st.lists(st.booleans(), max_size=40),
)
def test_every_stage_completes_exactly_its_quota(quotas: list[int], n_canaries: int, drops: list[bool]) -> None:
    """Lost tickets (a worker dies) are re-issued; completions per stage equal the quota."""
    coord, mirror = setup([Stage("sweep", 0, q) for q in quotas], n_canaries)
    done = [0] * len(quotas)
    drops_iter = iter(drops)
    now = 0.0
    while not mirror.finished:
        now += 0.01
        if coord.on_inflight("", 0, 0, now):
            mirror.update(coord.snapshot())
        t = mirror.take_ticket()
        assert t is not None
        if next(drops_iter, False):
            mirror.release()
            continue
        done[t.stage_index] += 1
        coord.on_done(t.stage_index, now)
        mirror.update(coord.snapshot())
    assert done == quotas


def test_burst_stage_hands_out_every_ticket_once_with_no_background() -> None:
    coord, mirror = setup([Stage("sweep", 6, 6, burst=True)], n_canaries=2)
    assert coord.on_inflight("", 0, 0, now=0)  # ready with zero background users
    mirror.update(coord.snapshot())
    assert mirror.take_ticket() is None
    tickets = mirror.take_burst()
    assert [t.seq for t in tickets] == list(range(6)) and [t.canary_index for t in tickets] == [0, 1] * 3
    assert mirror.take_burst() == []
    for t in tickets:
        coord.on_done(t.stage_index, now=0.1)
    mirror.update(coord.snapshot())
    assert mirror.finished
