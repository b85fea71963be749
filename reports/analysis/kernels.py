"""Vectorised kernels over a padded token matrix: grouping identical rows, logprob drift.

Why: a run can hold a million canaries; every figure is computed with whole-array numpy operations
over row chunks (bounded temporaries), never a Python loop per record. Rows are addressed by an
index array into the matrix, so a canary's subset is never copied whole.

Conventions: integer matrices pad with -1 past a row's length, so comparing padded rows also compares
lengths (a strict prefix differs at the shorter length, exactly as docs/design.md defines). Pure: no I/O.
What a completion *is* and where two first differ is ``reports.analysis.identity``'s; these only group and measure.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.read.matrices import StoredFloats, wide

Rows = npt.NDArray[np.int64]
_CHUNK_BYTES = 4 << 20  # temporaries per chunk stay around a few MiB
_P1 = np.uint64(0x9E3779B97F4A7C15)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)


def chunks(rows: Rows, width: int, itemsize: int = 8) -> Iterator[slice]:
    step = max(256, _CHUNK_BYTES // max(1, width * itemsize))
    for start in range(0, len(rows), step):
        yield slice(start, min(start + step, len(rows)))


def _row_hash(sub: npt.NDArray[Any]) -> npt.NDArray[np.uint64]:
    h = np.zeros(sub.shape[0], dtype=np.uint64)
    cols = sub.astype(np.int64, copy=False).view(np.uint64)
    with np.errstate(over="ignore"):
        for j in range(cols.shape[1]):
            h = h * _P1 + cols[:, j]
            h ^= h >> np.uint64(29)
        h = h * _P2
    return h


def group_rows(mat: npt.NDArray[Any], rows: Rows) -> tuple[npt.NDArray[np.int64], Rows]:
    """Label identical rows: ``labels[i]`` for ``rows[i]`` (0.. in first-appearance order) and, per label,
    the position in ``rows`` of its first member.

    Exact: rows are grouped by a 64-bit hash, then every row is checked against its group's first
    member; on a hash collision it falls back to an exact sort.
    """
    if len(rows) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    hashes = np.empty(len(rows), dtype=np.uint64)
    for sl in chunks(rows, mat.shape[1]):
        hashes[sl] = _row_hash(mat[rows[sl]])
    import pandas as pd  # type: ignore[import-untyped]  # here: the live table imports this package without pandas

    labels = np.asarray(pd.factorize(hashes)[0], dtype=np.int64)
    firsts = np.asarray(np.unique(labels, return_index=True)[1], dtype=np.int64)
    for sl in chunks(rows, mat.shape[1]):
        rep = mat[rows[firsts[labels[sl]]]]
        if not bool(np.all(mat[rows[sl]] == rep)):
            return _group_exact(mat, rows)
    return labels, firsts


def _group_exact(mat: npt.NDArray[Any], rows: Rows) -> tuple[npt.NDArray[np.int64], Rows]:
    _, firsts, inverse = np.unique(mat[rows], axis=0, return_index=True, return_inverse=True)
    order = np.argsort(firsts, kind="stable")  # relabel in first-appearance order
    relabel = np.empty_like(order)
    relabel[order] = np.arange(len(order))
    return relabel[inverse.ravel()].astype(np.int64), firsts[order].astype(np.int64)


def drift(
    lp: StoredFloats, rows: Rows, ref_lp: StoredFloats, compare_len: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Per row, over positions before ``compare_len`` where both logprobs exist: max and mean of
    |lp - ref_lp|, 1.0 if all are exactly equal else 0.0 (NaN for a row with no such position), and how many
    such positions there were."""
    n, w = len(rows), lp.shape[1]
    ref_lp = wide(ref_lp)  # float64 arithmetic whatever the matrix and the reference are held as: here, once
    dmax, dmean, bitwise = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    positions = np.zeros(n, np.int64)
    if w == 0 or n == 0:
        return dmax, dmean, bitwise, positions
    cols = np.arange(w)
    for sl in chunks(rows, w):
        d = np.abs(lp[rows[sl]] - ref_lp)
        valid = (cols < compare_len[sl, None]) & ~np.isnan(d)
        count = valid.sum(axis=1)
        has = count > 0
        d[~valid] = 0.0
        dmax[sl] = np.where(has, d.max(axis=1), np.nan)
        dmean[sl] = np.where(has, d.sum(axis=1) / np.maximum(count, 1), np.nan)
        bitwise[sl] = np.where(has, (d == 0.0).all(axis=1), np.nan)
        positions[sl] = count
    return dmax, dmean, bitwise, positions


def first_drift(
    lp: StoredFloats, rows: Rows, ref_lp: StoredFloats, compare_len: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """Per row, the first position before ``compare_len`` where its chosen-token logprob and the reference's
    both exist and are not bitwise equal; -1 where there is none (every compared position equal)."""
    n, w = len(rows), lp.shape[1]
    out = np.full(n, -1, np.int64)
    if w == 0 or n == 0:
        return out
    ref_lp = wide(ref_lp)
    cols = np.arange(w)
    for sl in chunks(rows, w):
        moved = (lp[rows[sl]] != ref_lp) & (cols < compare_len[sl, None])
        moved &= ~np.isnan(lp[rows[sl]]) & ~np.isnan(ref_lp)
        any_moved = moved.any(axis=1)
        out[sl] = np.where(any_moved, moved.argmax(axis=1), -1)
    return out
