"""Each canary takes the engine sample nearest its send time; too far away is unknown, not 0."""

from __future__ import annotations

import numpy as np

from reports.engine_join import nearest_sample


def test_nearest_sample() -> None:
    t = np.array([10.0, 20.0, 30.0])
    v = np.array([1.0, 2.0, 3.0])
    got = nearest_sample(t, v, np.array([0.0, 14.0, 15.0, 16.0, 31.0, 100.0]), max_gap_s=10.0)
    assert got[:5].tolist() == [1.0, 1.0, 1.0, 2.0, 3.0]  # a tie goes to the earlier sample
    assert np.isnan(got[5])
    assert np.isnan(nearest_sample(np.array([]), np.array([]), np.array([1.0]))).all()
