"""Small statistics the reports need: Wilson intervals and null-aware summaries.

Pure: numbers in, plain JSON-ready values out. A value that cannot be computed is ``None`` (rendered
as JSON ``null``), never 0: an empty set has no median.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval for k successes in n trials; ``None`` when n is 0.

    With k == 0 the lower bound is 0 and the upper bound is still above 0: no observed divergence
    bounds the rate, it does not prove it zero.
    """
    if n <= 0:
        return None
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return lo, hi


def ratio(k: int, n: int) -> float | None:
    return k / n if n > 0 else None


def num(x: Any) -> float | int | None:
    """A numpy scalar as a plain JSON number; NaN and infinities become ``None``."""
    if x is None:
        return None
    v = float(x)
    if not math.isfinite(v):
        return None
    return int(v) if v.is_integer() and isinstance(x, int | np.integer) else v


def median(values: npt.NDArray[Any]) -> float | None:
    vals = values[~np.isnan(values)] if values.dtype.kind == "f" else values
    return float(np.median(vals)) if vals.size else None


def quantiles(values: npt.NDArray[np.float64], qs: tuple[float, ...] = (0.5, 0.9, 0.99)) -> dict[str, Any] | None:
    vals = values[~np.isnan(values)]
    if vals.size == 0:
        return None
    out: dict[str, Any] = {f"p{round(q * 100)}": float(np.quantile(vals, q)) for q in qs}
    out["max"] = float(vals.max())
    out["n"] = int(vals.size)
    return out


def histogram(values: npt.NDArray[np.int64]) -> list[list[int]]:
    """[[value, count], ...] sorted by value: the exact distribution of small integer positions."""
    uniq, counts = np.unique(values, return_counts=True)
    return [[int(u), int(c)] for u, c in zip(uniq, counts, strict=True)]
