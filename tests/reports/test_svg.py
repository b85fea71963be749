import math

from hypothesis import given
from hypothesis import strategies as st

from reports.render.svg import nice_ceiling


def test_nice_ceiling_known_values() -> None:
    assert [nice_ceiling(v) for v in (0.0, 0.07, 0.1, 1.1, 3.3, 6.0, 33.0)] == [1.0, 0.1, 0.1, 2.0, 5.0, 10.0, 50.0]


@given(st.floats(min_value=1e-6, max_value=1e9, allow_nan=False))
def test_nice_ceiling_is_at_least_the_value_and_at_most_two_and_a_half_times_it(v: float) -> None:
    top = nice_ceiling(v)
    assert v <= top * (1 + 1e-9) and top <= 2.5 * v * (1 + 1e-9)
    mantissa = top / 10 ** math.floor(math.log10(top) + 1e-12)
    assert round(mantissa, 6) in (1.0, 2.0, 2.5, 5.0, 10.0)
