"""Finite numbers in reports: ``finite`` says whether a value is a real, finite number (charts and
cost skip the rest), and ``scrub`` keeps NaN and infinities out of a report object: each becomes
``None`` (JSON ``null``), and is counted.

Why: a figure computed from a broken number (an endpoint's ``NaN`` logprob, a hand-edited record)
must not stop the report: ``json`` refuses NaN in the HTML's embedded data, a chart cannot scale to
infinity, and ``null`` already means "cannot be computed" everywhere in ``report.json``. Pure.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard, TypeVar

import numpy as np

T = TypeVar("T")


def finite(v: object) -> TypeGuard[float]:
    """A real number that converts to a finite float (not a bool, not an int beyond float range)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def scrub(value: T) -> tuple[T, int]:
    """A copy of a JSON-ready value with every non-finite float replaced by ``None``; and how many were.

    The copy keeps the value's type: the report model (``reports.model.report``) types a figure that can come
    out non-finite as ``float | None``."""
    out, count = _scrub(value)
    return out, count


def _scrub(value: Any) -> tuple[Any, int]:
    if isinstance(value, float | np.floating):
        return (float(value), 0) if math.isfinite(value) else (None, 1)
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        total = 0
        for k, v in value.items():
            out[k], n = _scrub(v)
            total += n
        return out, total
    if isinstance(value, list | tuple):
        items = [_scrub(v) for v in value]
        return [v for v, _ in items], sum(n for _, n in items)
    return value, 0
