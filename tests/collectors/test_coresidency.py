"""The window join (running gauge over each canary's lifetime) and per-segment stats, against brute force."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.read.coresidency import segment_stats, window_inflight, window_running


def brute_window(
    start: list[float], end: list[float], t: list[float], running: list[float]
) -> list[tuple[float, float, float, int]]:
    out = []
    for s, e in zip(start, end, strict=True):
        inside = sorted(
            r
            for ti, r in zip(t, running, strict=True)
            if not (math.isnan(ti) or math.isnan(r) or math.isnan(s) or math.isnan(e)) and s <= ti <= e
        )
        if not inside:
            out.append((math.nan, math.nan, math.nan, 0))
        else:
            out.append((inside[0], float(np.median(inside)), inside[-1], len(inside)))
    return out


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


times = st.floats(0, 20, allow_nan=False).map(lambda x: round(x * 4) / 4)  # quarter seconds: many exact ties
gauges = st.one_of(st.integers(0, 6).map(float), st.sampled_from([0.5, 2.25, -1.0]), st.just(math.nan))
samples = st.lists(st.tuples(st.one_of(times, st.just(math.nan)), gauges), max_size=40)
windows = st.lists(
    st.tuples(times, st.one_of(st.floats(0, 5, allow_nan=False).map(lambda x: round(x * 4) / 4), st.just(math.nan))),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(samples, windows, st.integers(1, 8))
def test_window_join_equals_a_brute_force_loop(
    spec: list[tuple[float, float]], wins: list[tuple[float, float]], chunk: int
) -> None:
    t = [a for a, _ in spec]
    running = [b for _, b in spec]
    start = [s for s, _ in wins]
    end = [s + d for s, d in wins]  # a NaN latency: a failed canary with no lifetime
    lo, med, hi, count = window_running(start, end, t, running, chunk=chunk)  # small chunks: many passes
    for i, (bl, bm, bh, bc) in enumerate(brute_window(start, end, t, running)):
        assert count[i] == bc and same(lo[i], bl) and same(med[i], bm) and same(hi[i], bh), i


def test_window_includes_both_ends_and_ignores_samples_outside() -> None:
    t = [9.99, 10.0, 10.5, 11.0, 11.01]
    running = [100.0, 3.0, 5.0, 4.0, 100.0]
    lo, med, hi, count = window_running([10.0], [11.0], t, running)
    assert (lo[0], med[0], hi[0], count[0]) == (3.0, 4.0, 5.0, 3)


def test_burst_whose_samples_arrive_after_its_send_shows_the_burst() -> None:
    """vLLM, 500 copies at once: the sample nearest the send is taken before the burst arrives (0);
    the samples over each copy's lifetime show the batch it really shared."""
    sent = np.full(500, 100.0) + np.linspace(0, 0.01, 500)
    latency = np.full(500, 3.0)
    t = np.arange(99.0, 104.0, 0.05)
    running = np.where(t < 100.2, 0.0, np.where(t < 102.9, 500.0, 120.0))
    lo, med, hi, count = window_running(sent, sent + latency, t, running)
    assert (count >= 55).all()
    assert (med == 500.0).all() and (hi == 500.0).all() and (lo == 0.0).all()  # the min sees the admission


def test_no_samples_and_no_windows() -> None:
    lo, med, hi, count = window_running([1.0, 2.0], [1.5, math.nan], [], [])
    assert np.isnan(lo).all() and np.isnan(med).all() and np.isnan(hi).all() and count.tolist() == [0, 0]
    lo, med, hi, count = window_running([], [], [1.0], [2.0])
    assert len(lo) == len(count) == 0


@pytest.mark.timeout(60)
def test_a_million_canaries_join_in_bounded_time() -> None:
    """A million canaries, one at a time (as the canary user sends them), over a run sampled at 20 Hz."""
    n = 1_000_000
    rng = np.random.default_rng(0)
    latency = rng.uniform(0.05, 0.6, n)
    sent = np.cumsum(latency + 0.01)
    t = np.arange(0.0, float(sent[-1]) + 1.0, 0.05)
    running = rng.integers(0, 64, len(t)).astype(np.float64)
    t0 = time.perf_counter()
    lo, med, hi, count = window_running(sent, sent + latency, t, running)
    elapsed = time.perf_counter() - t0
    assert elapsed < 20, elapsed  # about a second on a laptop core; generous for a busy CI box
    assert int(count.sum()) > n and (np.isnan(med) == (count == 0)).all()
    i = int(np.flatnonzero(count >= 3)[0])
    inside = running[(t >= sent[i]) & (t <= sent[i] + latency[i])]
    assert (lo[i], med[i], hi[i]) == (inside.min(), float(np.median(inside)), inside.max())


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.lists(st.one_of(st.integers(0, 600).map(float), st.sampled_from([0.5, -3.0]), st.just(math.nan))),
        )
    )
)
def test_segment_stats_equals_per_segment_numpy(segments: list[list[float] | None]) -> None:
    lengths = [-1 if s is None else len(s) for s in segments]
    flat = [v for s in segments if s for v in s]
    lo, med, hi = segment_stats(np.array(flat, dtype=np.float64), np.array(lengths, dtype=np.int64))
    for i, seg in enumerate(segments):
        vals = [v for v in seg or [] if not math.isnan(v)]
        if not vals:
            assert math.isnan(lo[i]) and math.isnan(med[i]) and math.isnan(hi[i])
        else:
            assert (lo[i], med[i], hi[i]) == (min(vals), float(np.median(vals)), max(vals))


def _brute_inflight(
    s: float, e: float, starts: list[float], ends: list[float]
) -> tuple[float, tuple[float, float], float]:
    """The count over ``[s, e)`` evaluated at every point where it can change, and the bounds of its median on the
    5 ms grid from ``s``: what ``window_inflight`` must give, computed the slow, obvious way. A grid point that
    lands on a start or an end (in exact arithmetic) may fall on either side of it in floating point, and several
    requests may start or end there together, so each point's count is taken just before and just after it; the
    median is monotone in every point, so it lies between the medians of the lower and of the upper counts."""
    points = sorted({s, *(t for t in starts + ends if s < t < e)})

    def count(t: float) -> int:
        return sum(a <= t < b for a, b in zip(starts, ends, strict=True))

    counts = [count(t) for t in points]
    grid = s + 0.005 * np.arange(int((e - s) / 0.005 - 1e-9) + 1)
    side = [(count(t - 1e-7), count(t + 1e-7)) for t in grid]
    low = float(np.median([min(pair) for pair in side]))
    high = float(np.median([max(pair) for pair in side]))
    return float(min(counts)), (low, high), float(max(counts))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 400), st.integers(1, 300)),  # request start and length, in milliseconds
        min_size=1,
        max_size=25,
    ),
    st.integers(0, 400),
    st.integers(1, 300),
)
def test_window_inflight_matches_counting_by_hand(reqs: list[tuple[int, int]], w_start: int, w_len: int) -> None:
    """Min and max are exact; the median is the grid's, which the brute force reads on the same 5 ms grid."""
    starts = [a / 1000 for a, _ in reqs]
    ends = [(a + n) / 1000 for a, n in reqs]
    s, e = w_start / 1000, (w_start + w_len) / 1000
    starts_all, ends_all = [*starts, s], [*ends, e]  # the window's own request is one of the client's
    lo, med, hi = window_inflight([s], [e], starts_all, ends_all)
    want_lo, (med_low, med_high), want_hi = _brute_inflight(s, e, starts_all, ends_all)
    assert (lo[0], hi[0]) == (want_lo, want_hi)
    assert want_lo <= med[0] <= want_hi
    assert med_low <= med[0] <= med_high


def test_window_inflight_without_a_length_or_requests_is_nan() -> None:
    lo, med, hi = window_inflight([0.0, 1.0], [np.nan, 1.0], [0.0], [5.0])
    assert np.isnan(lo).all() and np.isnan(med).all() and np.isnan(hi).all()
    lo, _, _ = window_inflight([0.0], [1.0], [np.nan], [np.nan])
    assert np.isnan(lo[0])
