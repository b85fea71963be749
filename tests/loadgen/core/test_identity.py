"""The reference rule (``reference_index``): the modal completion, the earliest first on a tie."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.identity import reference_index


def test_the_modal_completion_wins_and_the_earliest_breaks_a_tie() -> None:
    assert reference_index([]) is None
    assert reference_index(["b", "a", "a"]) == 1
    assert reference_index(["b", "a", "a", "b"]) == 0
    assert reference_index([(1, 2), (1,), (1,), (1, 2)]) == 0


@given(st.lists(st.integers(0, 3), max_size=12))
def test_no_earlier_completion_is_as_frequent(labels: list[int]) -> None:
    at = reference_index(labels)
    if not labels:
        assert at is None
        return
    assert at is not None
    counts = Counter(labels)
    top = max(counts.values())
    assert counts[labels[at]] == top
    assert all(counts[label] < top for label in labels[:at])
