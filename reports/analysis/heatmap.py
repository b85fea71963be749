"""Logprob drift by token position × concurrency level: the numbers behind the report's heatmap.

For each level and each position of the reference, the largest |logprob − reference logprob| over the
level's completions at that position, counting only positions before each completion's first
divergence (where the tokens still agree) and where both logprobs are finite. Long references are
binned into at most ``MAX_COLUMNS`` columns of ``bin_width`` positions (the maximum over the bin).
Whole-array numpy over row chunks (``reports.analysis.kernels.chunks``). Pure: arrays in, a JSON-ready dict out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.read.matrices import StoredFloats
from reports.analysis.kernels import Rows, chunks
from reports.model.report import DriftHeatmap

MAX_COLUMNS = 64


def drift_by_position(
    lp: StoredFloats,
    rows: Rows,
    ref_lp: StoredFloats,
    compare_len: npt.NDArray[np.int64],
    row_levels: npt.NDArray[Any],
    levels: list[int],
    max_columns: int = MAX_COLUMNS,
) -> DriftHeatmap | None:
    """``{"positions", "bin_width", "levels": [c], "max": [[v | null per column] per level],
    "compared": [[n per column] per level]}``; ``rows`` index ``lp``; ``compare_len``, ``row_levels``
    align with ``rows``. None when there are no logprobs or no position to compare."""
    width = min(lp.shape[1], len(ref_lp))
    if width == 0 or len(rows) == 0 or not levels:
        return None
    ref = np.asarray(ref_lp[:width], dtype=np.float64)
    positions = int(min(width, max(0, int(np.max(compare_len, initial=0)))))
    if positions == 0:
        return None
    bw = max(1, -(-positions // max(1, max_columns)))
    ncol = -(-positions // bw)
    cols = np.arange(positions)
    out_max, out_n = [], []
    for level in levels:
        sel = np.flatnonzero(row_levels == level)
        best = np.full(positions, -np.inf)
        seen = np.zeros(positions, np.int64)
        for sl in chunks(sel, positions):
            idx = sel[sl]
            with np.errstate(invalid="ignore", over="ignore"):
                d = np.abs(lp[rows[idx], :positions] - ref[:positions])
            valid = (cols < compare_len[idx, None]) & np.isfinite(d)
            seen += valid.sum(axis=0)
            best = np.maximum(best, np.where(valid, d, -np.inf).max(axis=0, initial=-np.inf))
        pad = ncol * bw - positions
        b = np.concatenate([best, np.full(pad, -np.inf)]).reshape(ncol, bw).max(axis=1)
        n = np.concatenate([seen, np.zeros(pad, np.int64)]).reshape(ncol, bw).sum(axis=1)
        out_max.append([float(v) if c else None for v, c in zip(b.tolist(), n.tolist(), strict=True)])
        out_n.append([int(c) for c in n.tolist()])
    return {
        "positions": positions,
        "bin_width": bw,
        "levels": [int(lv) for lv in levels],
        "max": out_max,
        "compared": out_n,
    }
