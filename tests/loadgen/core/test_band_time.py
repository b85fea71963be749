"""``loadgen.core.band.time_in_band``: a life's shares below, within and above its level's band."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.band import level_band, time_in_band


def test_shares_against_the_band_of_level_three() -> None:
    assert level_band(3) == (3, 4)
    share = time_in_band({2: 0.1, 3: 0.5, 4: 0.2, 6: 0.2}, 3)
    assert share is not None
    assert (
        share.below == pytest.approx(0.1) and share.within == pytest.approx(0.7) and share.above == pytest.approx(0.2)
    )


def test_a_life_of_no_length_has_no_shares() -> None:
    assert time_in_band({}, 3) is None
    assert time_in_band({3: 0.0}, 3) is None


@given(st.dictionaries(st.integers(0, 80), st.floats(0.0, 10.0, allow_nan=False), min_size=1), st.integers(0, 64))
def test_shares_sum_to_one_and_follow_the_band(seconds: dict[int, float], level: int) -> None:
    share = time_in_band(seconds, level)
    if sum(seconds.values()) <= 0:
        assert share is None
        return
    assert share is not None
    assert share.below + share.within + share.above == pytest.approx(1.0)
    low, high = level_band(level)
    if all(low <= k <= high for k, s in seconds.items() if s > 0):
        assert share.within == pytest.approx(1.0)
