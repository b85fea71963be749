import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.load.coordination import REPORT_STALE_S, Coordinator, Mirror, StageSnapshot
from loadgen.load.stages import FailedBackground, Stage, StageTracker


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
    coord.on_inflight("a", 2, 2, now=0.0)
    ready = [coord.tracker.ready]
    assert coord.on_inflight("b", 2, 2, now=0.1)
    assert [*ready, coord.tracker.ready] == [False, True]
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


# --- held: every background slot of the level holds a request the server started -----------------


def test_snapshot_carries_held_through_a_message() -> None:
    snap = StageSnapshot(1, "sweep", 2, 4, 0, True, held=True)
    assert StageSnapshot.from_msg(snap.to_msg()) == snap
    assert StageSnapshot(1, "sweep", 2, 4, 0, True).held is False


def test_held_needs_every_fresh_report_to_hold_the_levels_background() -> None:
    coord, _ = setup([Stage("sweep", 4, 1)])
    assert not coord.snapshot().held
    coord.on_inflight("a", 2, 2, now=0.0)
    assert not coord.snapshot().held  # b's slots are not reported yet
    coord.on_inflight("b", 2, 1, now=0.1)
    assert not coord.snapshot().held  # one of b's slots holds nothing the server started
    assert coord.on_inflight("b", 2, 2, now=0.2)  # changed: publish
    assert coord.held and coord.snapshot().held
    assert not coord.on_inflight("b", 2, 2, now=0.3)  # nothing changed, already ready: nothing to publish
    assert coord.snapshot().held


def test_held_slots_sum_every_worker_and_are_published_while_the_level_is_reached() -> None:
    coord, _ = setup([Stage("sweep", 4, 1)])
    assert coord.on_inflight("a", 2, 1, now=0.0)  # 1 of 4: a count a waiting canary may be sent with
    assert coord.snapshot().held_slots == 1
    assert coord.on_inflight("b", 2, 2, now=0.1) and coord.snapshot().held_slots == 3
    assert coord.on_inflight("a", 2, 2, now=0.2) and coord.snapshot().held_slots == 4 and coord.held
    assert not coord.on_inflight("a", 2, 3, now=0.3)  # held: a hand-over's extra slot is no message
    assert StageSnapshot.from_msg(coord.snapshot().to_msg()).held_slots == 5


def test_held_goes_false_when_a_report_drops_a_held_slot() -> None:
    coord, _ = setup([Stage("sweep", 4, 1)])
    coord.on_inflight("a", 2, 2, now=0.0)
    coord.on_inflight("b", 2, 2, now=0.1)
    assert coord.snapshot().held and coord.tracker.ready
    assert coord.on_inflight("a", 2, 1, now=0.2)  # a slot between requests: publish the change
    assert not coord.snapshot().held
    assert coord.tracker.ready  # readiness, once reached, stays; held is the live view
    assert coord.on_inflight("a", 2, 2, now=0.3)
    assert coord.snapshot().held


@pytest.mark.parametrize(
    ("reports", "held"),
    [
        ([("a", 4, 4)], True),
        ([("a", 4, 5)], True),  # held above the users is still held (sums across workers)
        ([("a", 4, 3)], False),
        ([("a", 5, 5)], False),  # one user too many: the shape is still moving
        ([("a", 3, 3)], False),  # one user short
        ([("a", 2, 2), ("b", 2, 2)], True),
        ([("a", 3, 3), ("b", 1, 0)], False),
        ([("a", 0, 0), ("b", 4, 4)], True),
    ],
)
def test_held_sums_the_workers(reports: list[tuple[str, int, int]], held: bool) -> None:
    coord, _ = setup([Stage("sweep", 4, 1)])
    for i, (worker, users, h) in enumerate(reports):
        coord.on_inflight(worker, users, h, now=i * 0.1)
    assert coord.snapshot().held is held


def test_stale_reports_are_ignored_for_held() -> None:
    coord, _ = setup([Stage("sweep", 4, 1)])
    coord.on_inflight("a", 2, 2, now=0.0)
    coord.on_inflight("b", 2, 2, now=REPORT_STALE_S + 1)  # a's report is stale: only 2 users are known
    assert not coord.snapshot().held
    coord2, _ = setup([Stage("sweep", 2, 1)])
    coord2.on_inflight("gone", 2, 0, now=0.0)  # a worker that stopped reporting with empty slots
    coord2.on_inflight("a", 2, 2, now=REPORT_STALE_S + 1)
    assert coord2.snapshot().held  # its stale report no longer counts


def test_held_is_recomputed_when_the_stage_moves_on() -> None:
    coord, mirror = setup([Stage("sweep", 2, 1), Stage("sweep", 4, 1)])
    coord.on_inflight("a", 2, 2, now=0.0)
    mirror.update(coord.snapshot())
    assert coord.snapshot().held
    ticket = mirror.take_ticket()
    assert ticket is not None and ticket.level == 2
    coord.on_done(ticket.stage_index, now=0.1)  # level 2's quota is complete: level 4 now
    snap = coord.snapshot()
    assert snap.level == 4 and not snap.held  # two users hold level 2's slots, not level 4's
    coord.on_inflight("a", 4, 3, now=0.2)
    assert not coord.snapshot().held
    assert coord.on_inflight("a", 4, 4, now=0.3)
    assert coord.snapshot().held
    coord.on_done(1, now=0.4)
    assert coord.snapshot().finished and not coord.snapshot().held


def test_on_done_drops_held_when_the_reports_went_stale() -> None:
    coord, _ = setup([Stage("sweep", 2, 2)])
    coord.on_inflight("a", 2, 2, now=0.0)
    assert coord.snapshot().held
    coord.on_done(0, now=REPORT_STALE_S + 1)  # the stage goes on, but nothing fresh says the slots are held
    assert coord.snapshot().index == 0 and not coord.snapshot().held


def test_level_zero_is_held_with_no_background() -> None:
    coord, _ = setup([Stage("baseline", 0, 1), Stage("sweep", 3, 3, burst=True)])
    coord.on_inflight("a", 0, 0, now=0.0)
    assert coord.snapshot().held
    coord.on_done(0, now=0.1)  # a burst stage holds no background either
    assert coord.snapshot().burst and coord.snapshot().held


@settings(max_examples=200)
@given(
    level=st.integers(0, 6),
    reports=st.lists(
        st.tuples(st.sampled_from("abc"), st.integers(0, 4), st.integers(0, 4), st.floats(0, REPORT_STALE_S * 1.5)),
        max_size=30,
    ),
)
def test_held_is_the_fresh_sums_after_every_report(level: int, reports: list[tuple[str, int, int, float]]) -> None:
    """After any sequence of reports: held iff the fresh reports' users sum to the level's background and their
    held slots sum to at least that; on_inflight says to publish iff readiness was reached, held changed, or the
    held slots changed while the level is not held."""
    coord, _ = setup([Stage("sweep", level, 1)])
    last: dict[str, tuple[int, int, float]] = {}
    now = 0.0
    for worker, users, h, gap in reports:
        held = min(h, users)  # a worker's held slots are among its users
        now += gap
        was_held, was_ready, was_slots = coord.snapshot().held, coord.tracker.ready, coord.snapshot().held_slots
        published = coord.on_inflight(worker, users, held, now)
        last[worker] = (users, held, now)
        fresh = [(u, k) for u, k, at in last.values() if now - at <= REPORT_STALE_S]
        expect = sum(u for u, _ in fresh) == level <= sum(k for _, k in fresh)
        assert coord.snapshot().held is expect
        slots = sum(k for _, k in fresh)
        assert coord.snapshot().held_slots == slots
        moved = not expect and slots != was_slots  # a count a waiting canary may be sent with
        assert published == ((coord.tracker.ready and not was_ready) or expect != was_held or moved)


def _burst_tickets(n_canaries: int, size: int, seed: int | None) -> list[int]:
    coord = Coordinator(StageTracker([Stage("sweep", size * n_canaries, size * n_canaries, burst=True)], 5))
    mirror = Mirror(n_canaries, burst_mix_seed=seed)
    coord.on_inflight("", 0, 0, now=0)
    mirror.update(coord.snapshot())
    tickets = mirror.take_burst()
    assert [t.seq for t in tickets] == list(range(size * n_canaries)) and mirror.take_burst() == []
    return [t.canary_index for t in tickets]


@given(st.integers(1, 6), st.integers(1, 40), st.integers(0, 2**31))
@settings(max_examples=50)
def test_a_random_burst_mix_draws_every_copy_from_the_canaries_the_same_way_each_time(
    n: int, size: int, seed: int
) -> None:
    even = _burst_tickets(n, size, None)
    assert all(even.count(i) == size for i in range(n))
    mixed = _burst_tickets(n, size, seed)
    assert len(mixed) == size * n and set(mixed) <= set(range(n))
    assert mixed == _burst_tickets(n, size, seed)  # seeded: a scenario fires the same mixes


def test_random_bursts_vary_the_mix() -> None:
    """Over 4 canaries and bursts of 4..32 requests, the draws are not the even mix (what the test is for)."""
    mixes = [_burst_tickets(4, size, seed=13) for size in range(1, 9)]
    assert any(len({m.count(i) for i in range(4)}) > 1 for m in mixes)


# --- a level whose background failed for good ends early ------------------------------------------


def test_a_failed_background_report_ends_the_current_sweep_level_and_is_recorded() -> None:
    stages = [Stage("baseline", 0, 1), Stage("sweep", 8, 4), Stage("sweep", 2, 4), Stage("sweep", 3, 3, burst=True)]
    coord, mirror = setup(stages)
    coord.on_inflight("a", 0, 0, now=0.0)
    coord.on_done(0, now=0.0)
    assert coord.tracker.index == 1
    mirror.update(coord.snapshot())
    failed = FailedBackground(1, 32, 32, "HTTP 400: too long")
    assert not coord.on_inflight("a", 8, 0, now=0.1, failed=FailedBackground(0, 32, 32, "x"))  # not the current
    assert coord.on_inflight("a", 8, 0, now=0.2, failed=failed)  # ended: publish
    assert coord.tracker.index == 2 and coord.tracker.completed == 0
    assert coord.tracker.ended_by_background == [
        {
            "level": 8,
            "completed": 0,
            "quota": 4,
            "background_errors": 32,
            "background_requests": 32,
            "first_error": "HTTP 400: too long",
        }
    ]
    assert not coord.on_inflight("a", 8, 0, now=0.3, failed=failed)  # the same word again changes nothing
    assert len(coord.tracker.ended_by_background) == 1 and coord.tracker.index == 2
    assert coord.tracker.finished is False and coord.tracker.ended_early == []
    coord.tracker.index = 3
    assert not coord.tracker.end_by_background(FailedBackground(3, 9, 9, "x"))  # a burst has no background


def test_a_canary_waiting_for_an_ended_level_sees_it_moved_on() -> None:
    coord, mirror = setup([Stage("sweep", 4, 2), Stage("sweep", 8, 2)])
    coord.on_inflight("a", 4, 4, now=0.0)
    mirror.update(coord.snapshot())
    ticket = mirror.take_ticket()
    assert ticket is not None and not mirror.moved_on(ticket)
    coord.on_inflight("a", 4, 0, now=0.1, failed=FailedBackground(0, 16, 16, "HTTP 400: no"))
    mirror.update(coord.snapshot())
    assert mirror.moved_on(ticket) and mirror.outstanding is None  # not sent; the next level's ticket is free


def test_the_failed_background_word_travels_as_a_plain_dict() -> None:
    failed = FailedBackground(2, 40, 41, "HTTP 400: prompt too long")
    msg = failed.to_msg()
    assert all(isinstance(v, int | str) for v in msg.values())
    assert FailedBackground.from_msg(msg) == failed and FailedBackground.from_msg(None) is None
