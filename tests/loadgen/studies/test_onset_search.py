"""The pure onset search: doubling then bisection, for any ground truth.

Examples pin the order of levels tried; properties (hypothesis) say that for every monotone ground
truth the search returns its onset with the level below it clean, and for any ground truth at all it
never tries a level twice, stays within 1..max_level, stops within 2 log2(max_level) + 2 steps and
returns a bracket its own observations support.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.studies.onset_search import Bracket, bracket, next_level, search


def monotone(onset: int | None) -> Callable[[int], bool]:
    return lambda level: onset is not None and level >= onset


def test_doubling_then_bisection_in_order() -> None:
    tried = search(32, monotone(11))
    assert list(tried) == [1, 2, 4, 8, 16, 12, 10, 11]
    assert bracket(tried) == Bracket(highest_clean=10, lowest_divergent=11)


def test_doubling_is_capped_at_max_level() -> None:
    assert list(search(20, monotone(None))) == [1, 2, 4, 8, 16, 20]
    assert list(search(20, monotone(19))) == [1, 2, 4, 8, 16, 20, 18, 19]
    assert bracket(search(20, monotone(None))) == Bracket(highest_clean=20, lowest_divergent=None)


def test_divergence_at_level_one_stops_at_once() -> None:
    tried = search(32, monotone(1))
    assert tried == {1: True}
    assert bracket(tried) == Bracket(highest_clean=0, lowest_divergent=1)


def test_max_level_one() -> None:
    assert search(1, monotone(None)) == {1: False}
    assert search(1, monotone(1)) == {1: True}


def test_max_level_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        next_level(0, {})


def test_next_level_is_a_function_of_the_results_only() -> None:
    assert next_level(32, {}) == 1
    assert next_level(32, {1: False, 2: False}) == 4
    assert next_level(32, {1: False, 2: False, 4: True}) == 3
    assert next_level(32, {1: False, 2: False, 4: True, 3: False}) is None


def _bound(max_level: int) -> int:
    return 2 * math.ceil(math.log2(max_level)) + 2 if max_level > 1 else 1


@given(max_level=st.integers(1, 2000), data=st.data())
def test_any_monotone_ground_truth_is_found(max_level: int, data: st.DataObject) -> None:
    truth = data.draw(st.one_of(st.none(), st.integers(1, max_level)), label="onset")
    tried = search(max_level, monotone(truth))
    b = bracket(tried)
    assert b.lowest_divergent == truth
    assert b.highest_clean == (max_level if truth is None else truth - 1)
    if truth is not None and truth > 1:
        assert tried[truth - 1] is False  # the level just below was tried and seen clean
    assert len(tried) <= _bound(max_level)


@given(max_level=st.integers(1, 500), answers=st.lists(st.booleans(), max_size=64))
def test_any_ground_truth_no_repeats_within_range_consistent(max_level: int, answers: list[bool]) -> None:
    """An endpoint need not be monotone: whatever it answers, the search ends, never repeats a level,
    stays within 1..max_level, and its bracket is what it saw (the onset diverged, the level below it
    was seen clean or is the baseline)."""
    tried: list[int] = []
    results: dict[int, bool] = {}
    while (level := next_level(max_level, results)) is not None:
        assert 1 <= level <= max_level
        assert level not in results
        tried.append(level)
        results[level] = answers[len(tried) - 1] if len(tried) <= len(answers) else False
        assert len(tried) <= _bound(max_level)
    b = bracket(results)
    if b.lowest_divergent is None:
        assert b.highest_clean == max_level and not any(results.values())
    else:
        assert results[b.lowest_divergent] is True
        assert b.highest_clean == b.lowest_divergent - 1
        assert b.highest_clean == 0 or results[b.highest_clean] is False
