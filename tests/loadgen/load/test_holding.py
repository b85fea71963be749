"""Holding a level: seeded first delays, slots counted once the server started a request, hand-over timing.

No real clock: ``Progress`` reads ``time.perf_counter`` through its module, which these tests replace
with a counter they advance, so every hand-over decision is exact.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.band import CEILING, FLOOR
from loadgen.load import holding
from loadgen.load.holding import HANDOVER_TOKENS, Holding, Progress, Slot, hands_over, level_bound, spawn_delay

# --- spawn_delay --------------------------------------------------------------------------------


@given(
    seed=st.integers(min_value=0, max_value=2**40),
    user_index=st.integers(min_value=0, max_value=100_000),
    jitter=st.floats(min_value=1e-6, max_value=1e4, allow_nan=False, allow_infinity=False),
)
def test_spawn_delay_is_seeded_and_within_the_jitter(seed: int, user_index: int, jitter: float) -> None:
    delay = spawn_delay(seed, user_index, jitter)
    assert 0.0 <= delay < jitter
    assert spawn_delay(seed, user_index, jitter) == delay  # the same user of the same seed waits the same


@given(
    seed=st.integers(min_value=0, max_value=2**40),
    user_index=st.integers(min_value=0, max_value=100_000),
    jitter=st.sampled_from([0.0, -0.0, -1.0, -1e-9]),
)
def test_no_jitter_means_no_delay(seed: int, user_index: int, jitter: float) -> None:
    assert spawn_delay(seed, user_index, jitter) == 0.0


@given(
    seed=st.integers(min_value=0, max_value=2**40),
    user_index=st.integers(min_value=0, max_value=100_000),
    jitter=st.floats(min_value=1e-3, max_value=1e3, allow_nan=False),
)
def test_the_jitter_scales_a_users_delay_without_reordering_users(seed: int, user_index: int, jitter: float) -> None:
    assert spawn_delay(seed, user_index, 2 * jitter) == pytest.approx(2 * spawn_delay(seed, user_index, jitter))


@pytest.mark.parametrize("seed", [0, 1, 2, 7, 12345])
def test_sixty_four_users_spread_over_the_jitter(seed: int) -> None:
    """Deterministic for each seed (no flake): distinct delays, every quarter of the range used, a central mean."""
    jitter = 0.25
    delays = [spawn_delay(seed, i, jitter) for i in range(64)]
    assert len(set(delays)) == 64
    assert all(0.0 <= d < jitter for d in delays)
    quarters = {int(d / jitter * 4) for d in delays}
    assert quarters == {0, 1, 2, 3}
    assert min(delays) < jitter / 8 and max(delays) > jitter * 7 / 8
    assert abs(sum(delays) / 64 - jitter / 2) < jitter * 0.15


def test_seeds_and_users_give_different_delays() -> None:
    one = [spawn_delay(1, i, 1.0) for i in range(64)]
    assert one != [spawn_delay(2, i, 1.0) for i in range(64)]
    assert one[0] != one[1]


# --- Slot and Holding ---------------------------------------------------------------------------


def test_all_held_compares_held_slots_with_slots_alive() -> None:
    assert Holding().all_held  # no slots: nothing to hold
    assert not Holding(slots=2, held=1).all_held
    assert Holding(slots=2, held=2).all_held


@given(
    n_slots=st.integers(min_value=1, max_value=6),
    ops=st.lists(st.tuples(st.integers(min_value=0, max_value=5), st.booleans()), max_size=80),
)
def test_held_counts_slots_with_a_started_request(n_slots: int, ops: list[tuple[int, bool]]) -> None:
    """Any interleaving of starts and finishes (a slot overlaps requests during a hand-over): held is the number
    of slots with at least one started, unfinished request."""
    h = Holding(slots=n_slots)
    slots = [Slot(h) for _ in range(n_slots)]
    counts = [0] * n_slots
    for index, start in ops:
        i = index % n_slots
        if start:
            slots[i].start()
            counts[i] += 1
        elif counts[i] > 0:  # a slot only finishes what it started
            slots[i].finish()
            counts[i] -= 1
        assert [s.started for s in slots] == counts
        assert h.held == sum(c > 0 for c in counts)
        assert h.all_held == all(c > 0 for c in counts)


# --- Progress -----------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_first_call_marks_the_slot_started_exactly_once(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(holding, "time", clock)
    h = Holding(slots=1)
    slot = Slot(h)
    p = Progress(slot, max_tokens=100, handover_s=0.0)
    assert slot.started == 0 and h.held == 0
    p(1)  # first token
    assert p.started and slot.started == 1 and h.held == 1
    for tokens in range(2, 10):
        clock.now += 0.01
        p(tokens)
    assert slot.started == 1 and h.held == 1 and p.tokens == 9
    assert not p.due.is_set()
    p.done()
    assert slot.started == 0 and h.held == 0 and p.due.is_set()


def test_done_without_a_first_byte_does_not_finish_the_slot() -> None:
    """A request refused or cut before any byte never held the slot: done() must not un-hold it."""
    h = Holding(slots=1)
    slot = Slot(h)
    slot.start()  # the request this one hands over from
    p = Progress(slot, max_tokens=16, handover_s=0.02)
    p.done()
    assert p.due.is_set() and not p.started
    assert slot.started == 1 and h.held == 1


def test_a_hand_over_keeps_the_slot_held_across_the_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(holding, "time", Clock())
    h = Holding(slots=1)
    slot = Slot(h)
    current, successor = Progress(slot, 8, 0.0), Progress(slot, 8, 0.0)
    current(0)
    current(1)
    successor(0)  # the successor's first byte while the current one still streams
    assert slot.started == 2 and h.held == 1
    current.done()
    assert h.held == 1  # the successor holds it
    successor.done()
    assert h.held == 0


def _feed(p: Progress, clock: Clock, tokens: int, step: float) -> list[bool]:
    """Call ``p`` as the client would: token k at t = (k - 1) * step; ``due`` before any token (index 0), then
    after each call."""
    due = [p.due.is_set()]
    for k in range(1, tokens + 1):
        clock.now = (k - 1) * step
        p(k)
        due.append(p.due.is_set())
    return due


def _first_due(max_tokens: int, step: float, handover_s: float, tokens: int) -> int | None:
    for k in range(1, tokens + 1):
        left = max_tokens - k
        if left <= HANDOVER_TOKENS or (k >= 2 and left * step <= handover_s):
            return k
    return None


# Dyadic steps and hand-over times: every product and quotient the rule computes is exact.
STEPS = st.integers(min_value=0, max_value=12).map(lambda e: 2.0**-e)
HANDOVERS = st.integers(min_value=0, max_value=1 << 14).map(lambda m: m / 4096)


@given(
    max_tokens=st.integers(min_value=HANDOVER_TOKENS + 2, max_value=300),
    step=STEPS,
    handover_s=HANDOVERS,
)
def test_due_is_set_once_few_tokens_or_little_time_is_left(max_tokens: int, step: float, handover_s: float) -> None:
    """``due`` turns on at the first token after which HANDOVER_TOKENS tokens or fewer remain, or where the
    remaining tokens at the observed pace take at most ``handover_s`` (a pace needs two tokens), and stays on."""
    clock = Clock()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(holding, "time", clock)
        h = Holding(slots=1)
        p = Progress(Slot(h), max_tokens, handover_s)
        events = max_tokens
        due = _feed(p, clock, events, step)
    first = _first_due(max_tokens, step, handover_s, events)
    assert first is not None  # at the latest when HANDOVER_TOKENS remain
    assert first <= max_tokens - HANDOVER_TOKENS
    assert due == [k >= first for k in range(events + 1)]
    assert h.held == 1  # due says nothing about the slot: only done() finishes it


@given(
    max_tokens=st.integers(min_value=HANDOVER_TOKENS + 2, max_value=300),
    step=STEPS,
    handover_s=HANDOVERS,
    data=st.data(),
)
def test_a_first_piece_of_many_tokens_does_not_make_the_pace_look_faster(
    max_tokens: int, step: float, handover_s: float, data: st.DataObject
) -> None:
    """The first read holds the first ``n`` tokens (generated a step apart, read together when the nth came);
    then every token as it comes. ``due`` turns on where a reader of every token would see it, with the
    piece's ``n`` tokens as the lead where that is more than HANDOVER_TOKENS, or at the first token after
    the piece when that point had already passed: never sooner by pace, as one taken over the piece's
    tokens (``n`` times too fast) would have it."""
    n = data.draw(st.integers(min_value=1, max_value=max_tokens), label="first piece")
    clock = Clock()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(holding, "time", clock)
        p = Progress(Slot(Holding(slots=1)), max_tokens, handover_s)
        due = []
        for k in range(n, max_tokens + 1):
            clock.now = (k - 1) * step
            p(k)
            due.append(p.due.is_set())
    first = next(
        k
        for k in range(n, max_tokens + 1)
        if max_tokens - k <= max(HANDOVER_TOKENS, n) or (k > n and (max_tokens - k) * step <= handover_s)
    )
    assert due == [k >= first for k in range(n, max_tokens + 1)]


def test_due_by_tokens_left_on_a_fast_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(holding, "time", clock)
    p = Progress(Slot(Holding(slots=1)), max_tokens=64, handover_s=0.02)
    due = _feed(p, clock, 64, step=2.0**-12)  # ~0.24 ms a token: 4 tokens left take ~1 ms, under 0.02 s
    # 0.02 s covers 81 tokens at this pace, so time rules from the second event
    assert due.index(True) == 2
    p2 = Progress(Slot(Holding(slots=1)), max_tokens=64, handover_s=0.0)
    due = _feed(p2, clock, 64, step=2.0**-12)
    assert due.index(True) == 64 - HANDOVER_TOKENS


def test_due_by_time_left_on_a_slow_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(holding, "time", clock)
    p = Progress(Slot(Holding(slots=1)), max_tokens=1000, handover_s=2.5)
    due = _feed(p, clock, 1000, step=0.125)  # 20 tokens left take 2.5 s
    assert due.index(True) == 980


def test_done_sets_due_even_when_the_stream_ended_early(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request that stops before max_tokens (a stop sequence, EOS) hands over at its end."""
    clock = Clock()
    monkeypatch.setattr(holding, "time", clock)
    p = Progress(Slot(Holding(slots=1)), max_tokens=128, handover_s=0.0)
    assert _feed(p, clock, 10, step=0.01) == [False] * 11
    p.done()
    assert p.due.is_set()


@pytest.mark.parametrize("max_tokens", [2, 3, HANDOVER_TOKENS + 1])
def test_due_when_few_tokens_remain_after_the_first_event(max_tokens: int, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(holding, "time", clock)
    p = Progress(Slot(Holding(slots=1)), max_tokens=max_tokens, handover_s=0.0)
    due = _feed(p, clock, 1, step=0.01)
    assert due[1], f"{max_tokens - 1} tokens still to come after the first"


def test_each_request_has_its_own_due() -> None:
    """The hand-over loop waits on the newest request's ``due``: one request's end does not set another's."""
    slot = Slot(Holding(slots=1))
    a, b = Progress(slot, 8, 0.0), Progress(slot, 8, 0.0)
    a.done()
    assert a.due.is_set() and not b.due.is_set()


# --- the side of its level a slot errs on -------------------------------------------------------------


def test_only_a_stream_seen_token_by_token_hands_over() -> None:
    """A floor needs a hand-over point seen from the tokens; anything else is a ceiling (docs/design.md, "The
    level's band"): not streamed, a stream seen coming in one piece, no hand-over asked for, a pause between
    requests."""
    assert hands_over(True, False, 0.05, 0.0) and level_bound(True, False, 0.05, 0.0) == FLOOR
    unseen = [(False, False, 0.05, 0.0), (True, True, 0.05, 0.0), (True, False, 0.0, 0.0), (True, False, 0.05, 1.0)]
    for case in unseen:
        assert not hands_over(*case) and level_bound(*case) == CEILING, case


@given(
    stream=st.booleans(),
    buffered=st.booleans(),
    handover_s=st.floats(min_value=0.0, max_value=10.0),
    wait_s=st.floats(min_value=0.0, max_value=10.0),
)
def test_a_level_is_a_floor_exactly_where_a_slot_hands_over(
    stream: bool, buffered: bool, handover_s: float, wait_s: float
) -> None:
    bound = level_bound(stream, buffered, handover_s, wait_s)
    assert bound in (FLOOR, CEILING)
    assert (bound == FLOOR) == hands_over(stream, buffered, handover_s, wait_s)
    if not stream or buffered:  # progress unseen: never a floor, whatever the hand-over settings
        assert bound == CEILING


def _read_coalesced(p: Progress, clock: Clock, tokens: int, step: float, most_s: float) -> tuple[float | None, int]:
    """A reader that waits ``p.read_pause(most_s)`` before each read and then sees every token that arrived
    meanwhile (token k at (k - 1) * step): when it first saw ``due``, and how many reads it took."""
    now, seen, reads, due_at = 0.0, 0, 0, None
    while seen < tokens:
        arrived = min(tokens, int(now / step + 1e-9) + 1)
        if arrived == seen:  # nothing new: the next read returns with the next token
            now = seen * step
            arrived = seen + 1
        clock.now = now
        p(arrived)
        seen, reads = arrived, reads + 1
        if due_at is None and p.due.is_set():
            due_at = now
        now += p.read_pause(most_s)
    return due_at, reads


@given(
    max_tokens=st.integers(min_value=HANDOVER_TOKENS + 2, max_value=300),
    step=STEPS,
    handover_s=HANDOVERS,
    most_s=st.sampled_from([0.0, 0.02, 0.05, 0.25]),
)
def test_paced_reads_see_the_hand_over_no_later_than_reading_every_event(
    max_tokens: int, step: float, handover_s: float, most_s: float
) -> None:
    """A background stream read at most every ``most_s`` (``loadgen.load.client._read_frames``) sees its
    hand-over point within one token of a reader that takes every event as it comes, at a steady pace."""
    clock = Clock()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(holding, "time", clock)
        first = _first_due(max_tokens, step, handover_s, max_tokens)
        assert first is not None
        due_at, reads = _read_coalesced(
            Progress(Slot(Holding(slots=1)), max_tokens, handover_s), clock, max_tokens, step, most_s
        )
    assert due_at is not None and due_at <= (first - 1) * step + step
    assert reads <= max_tokens


def test_paced_reads_take_one_read_per_several_events_mid_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 100 tokens a second and reads at most every 50 ms, a long stream takes about a fifth of the reads."""
    clock = Clock()
    monkeypatch.setattr(holding, "time", clock)
    p = Progress(Slot(Holding(slots=1)), max_tokens=500, handover_s=0.05)
    _, reads = _read_coalesced(p, clock, 500, step=0.01, most_s=0.05)
    assert reads < 500 / 4


# --- Buffering: streams that come in one piece ---------------------------------------------------


def test_a_stream_in_one_piece_is_told_from_a_streamed_one() -> None:
    assert holding.in_one_piece(0.3, 0.3002, 3)  # a pause, then every token at once (a buffering proxy)
    assert not holding.in_one_piece(0.3, 0.5, 20)  # 10 ms a token: streamed
    assert not holding.in_one_piece(2.0, 2.03, 4)  # a long queue, then 10 ms a token: streamed
    assert not holding.in_one_piece(0.002, 0.00201, 3)  # no pause before it: a fast local server, not a proxy
    assert not holding.in_one_piece(0.3, 0.3, 1)  # one token says nothing
    assert not holding.in_one_piece(None, 0.3, 3)


def test_buffering_is_seen_after_answers_in_a_row_and_said_once() -> None:
    b = holding.Buffering()
    one_piece, streamed = (0.3, 0.3001, 3), (0.3, 0.5, 20)
    answers = [one_piece] * (holding.BUFFERED_AFTER - 1) + [streamed] + [one_piece] * holding.BUFFERED_AFTER
    said = [b.observe(*a) for a in answers]
    assert said == [False] * (len(answers) - 1) + [True] and b.seen  # a streamed answer starts the count again
    assert not b.observe(*one_piece) and b.seen  # said once; it stays seen for the run
