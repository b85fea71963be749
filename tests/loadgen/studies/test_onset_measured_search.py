"""The onset search keyed by what each canary measured, not by the level asked (``onset_search.next_step``).

An endpoint need not hold the level asked: each canary comes back with the level it was measured at. Examples pin
the steps for an endpoint that holds every level, one that always runs one more, one that leaves a slot empty,
and a level whose canaries were measured at two levels. The property: with an oracle "diverges iff measured >= k"
and any measured offsets per ask, the search never asks a level twice or outside 1..max_level, and when it
decides, it decides k (or "none up to max_level" only when k is above it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from hypothesis import given
from hypothesis import strategies as st

from loadgen.studies.onset_search import bracket, merge, next_step, search_measured

Ask = Callable[[int], Iterable[tuple[int, bool]]]


def endpoint(k: int, offsets: tuple[int, ...] = (0, 0)) -> Ask:
    """Each ask gives one canary per offset, measured at level + offset, diverging iff measured >= k."""
    return lambda level: [(max(0, level + o), max(0, level + o) >= k) for o in offsets]


def test_an_endpoint_that_holds_every_level_bisects_as_before() -> None:
    results, asked, stopped = search_measured(4, endpoint(3))
    assert stopped is None and list(asked) == [1, 2, 4, 3]
    assert bracket(results).lowest_divergent == 3 and bracket(results).highest_clean == 2


def test_an_endpoint_that_always_runs_one_more_stops_naming_what_was_measured() -> None:
    results, asked, stopped = search_measured(8, endpoint(3, (1,)))
    assert list(asked) == [1, 4, 3]  # 1 measured 2 (clean): doubling from 2; 4 measured 5, then 3 measured 4
    assert results == {2: False, 5: True, 4: True}
    assert stopped is not None
    assert "needs a canary measured beside 3 other requests; level 3 was asked" in stopped
    assert "measured beside 4: the endpoint does not hold that level" in stopped


def test_an_empty_slot_at_level_one_stops_at_once() -> None:
    _, asked, stopped = search_measured(8, endpoint(3, (-1,)))
    assert list(asked) == [1] and stopped is not None and "measured beside 0" in stopped


def test_a_level_measured_at_two_levels_is_placed_at_both() -> None:
    results = merge({}, [(2, False), (3, True), (3, False)])
    assert results == {2: False, 3: True}  # divergent where any canary measured there diverged
    assert next_step(8, results, {2: [2, 3, 3]}).level is None  # 2 clean, 3 divergent: decided
    assert bracket(results).lowest_divergent == 3


def test_divergence_beside_no_other_request_stops() -> None:
    step = next_step(8, {0: True, 1: True}, {1: [0, 1]})
    assert step.level is None and step.stopped is not None and "disagrees with itself alone" in step.stopped


@given(max_level=st.integers(1, 300), k=st.integers(1, 400), data=st.data())
def test_decides_nothing_but_the_true_onset_whatever_was_measured(max_level: int, k: int, data: st.DataObject) -> None:
    tried: list[int] = []

    def ask(level: int) -> list[tuple[int, bool]]:
        assert 1 <= level <= max_level and level not in tried
        tried.append(level)
        offsets = data.draw(st.lists(st.integers(-6, 6), min_size=1, max_size=4), label=f"offsets at {level}")
        return [(m, m >= k) for m in (max(0, level + o) for o in offsets)]

    results, asked, stopped = search_measured(max_level, ask)
    assert list(asked) == tried
    if stopped is None:
        b = bracket(results)
        if b.lowest_divergent is None:
            assert k > b.highest_clean >= max_level
        else:
            assert b.lowest_divergent == k and b.highest_clean == k - 1
