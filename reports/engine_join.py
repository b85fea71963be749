"""Join each canary to the engine-metrics sample nearest its send time.

Why: records written before the scraper knew the gauge carry no ``engine_running``; the scraped
``engine_metrics.jsonl`` still says how busy the engine was. Pure: arrays in, array out.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]


def nearest_sample(sample_t: Floats, values: Floats, query_t: Floats, max_gap_s: float = 30.0) -> Floats:
    """For each query time, the value of the sample nearest in time (earlier wins a tie); NaN when
    there are no samples or the nearest is more than ``max_gap_s`` away. ``sample_t`` must be sorted."""
    out = np.full(len(query_t), np.nan)
    if len(sample_t) == 0:
        return out
    right = np.clip(np.searchsorted(sample_t, query_t, side="left"), 0, len(sample_t) - 1)
    left = np.clip(right - 1, 0, len(sample_t) - 1)
    pick = np.where(np.abs(query_t - sample_t[left]) <= np.abs(sample_t[right] - query_t), left, right)
    near = np.abs(sample_t[pick] - query_t) <= max_gap_s
    out[near] = values[pick[near]]
    return out
