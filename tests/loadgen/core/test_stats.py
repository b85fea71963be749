"""Wilson intervals against published values; null-aware summaries."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.core.stats import histogram, num, wilson


def test_wilson_published_values() -> None:
    # Newcombe (1998), Table I: 0/10 -> 0 to 0.2775; 5/10 -> 0.2366 to 0.7634; 10/10 -> 0.7225 to 1
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson(0, 0) is None


def test_summaries_are_null_not_zero() -> None:
    assert num(np.float64("nan")) is None and num(np.int64(3)) == 3
    assert histogram(np.array([3, 1, 3])) == [[1, 1], [3, 2]]
