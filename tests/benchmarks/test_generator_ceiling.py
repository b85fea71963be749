"""The generator-ceiling benchmark's own arithmetic on fixed input: the window, the CPU read from samples, the ratios.

Why: the script once printed a generator CPU of 0% and a per-core ratio of ``nan`` for the tool, and
timed it over windows five times the asked length; a figure it prints must come from the whole window
it names. No timing is asserted: the inputs are fixed numbers.
"""

from __future__ import annotations

import math

from generator_ceiling import Measured, measured_median, ratio, share, steady_window
from harness import Sample, cpu_at, cpu_between


def samples(*points: tuple[float, float]) -> list[Sample]:
    return [Sample(t, cpu, 0) for t, cpu in points]


def test_cpu_is_interpolated_at_both_ends_of_the_window() -> None:
    got = samples((10.0, 1.0), (10.2, 1.2), (10.4, 1.3), (10.6, 1.5))
    assert cpu_at(got, 10.1) == 1.1
    assert math.isclose(cpu_between(got, 10.1, 10.5), 1.4 - 1.1)


def test_a_window_the_samples_do_not_cover_has_no_cpu_figure() -> None:
    got = samples((10.0, 1.0), (10.2, 1.2))
    assert math.isnan(cpu_between(got, 9.0, 10.1))  # the process was found late
    assert math.isnan(cpu_between(got, 10.1, 11.0))  # it ended before the window did
    assert math.isnan(cpu_between(got, 10.1, 10.1))  # an empty window
    assert math.isnan(cpu_between([], 10.0, 10.2))
    assert math.isnan(cpu_between(samples((10.0, 1.0)), 10.0, 10.0))


def test_the_window_is_the_asked_length_from_after_the_ramp() -> None:
    times = [100.0 + 0.01 * i for i in range(3000)]  # 100 completions a second for 30 s
    n, t0, t1 = steady_window(times, last_canary=129.0, ramp_s=1.0, seconds=8.0)
    assert (t0, t1) == (101.0, 109.0)
    assert n == 801  # both ends counted
    m = Measured(n, t1 - t0, cpu_s=4.0, server_cpu_s=2.0)
    assert math.isclose(m.rate, 100.125)
    assert math.isclose(m.per_core, 200.25)


def test_the_window_ends_at_the_last_canary() -> None:
    times = [100.0 + 0.01 * i for i in range(1000)]
    n, t0, t1 = steady_window(times, last_canary=104.0, ramp_s=1.0, seconds=8.0)
    assert (t0, t1, n) == (101.0, 104.0, 301)
    assert steady_window(times, last_canary=100.5, ramp_s=1.0, seconds=8.0)[2] == 101.0  # empty, not negative
    assert steady_window([], last_canary=0.0, ramp_s=1.0, seconds=8.0) == (0, 0.0, 0.0)


def test_figures_not_measured_print_as_such_and_stay_out_of_medians() -> None:
    empty = Measured(0, 0.0, cpu_s=float("nan"), server_cpu_s=float("nan"))
    assert math.isnan(empty.rate) and math.isnan(empty.per_core)
    assert share(float("nan"), 8.0) == "n/a" and share(4.0, 0.0) == "n/a" and share(4.0, 8.0) == "50%"
    assert ratio(float("nan"), 10.0) == "n/a" and ratio(7.5, 10.0) == "0.75x"
    assert measured_median([float("nan"), 3.0, 5.0]) == 4.0
