"""Sequences as padded matrices: one row per record, ``-1`` or NaN past each row's length.

Why apart: every reader (the reference and fast column builders, the columns-file reader, the parallel
reader that stacks its parts) turns per-record sequences into the same padded numpy matrices and stacks
chunks the same way; this is that arithmetic alone. A row whose sequence is missing has length ``-1``.
Pure numpy: must not read files or know what a canary record holds.
"""

from __future__ import annotations

import mmap
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt

IntMatrix = npt.NDArray[np.integer[Any]]
FloatMatrix = npt.NDArray[np.float64]
# a float matrix as held: float32 where every value is one exactly (``narrow``), else float64; arithmetic on it
# reads it as float64 (``wide``)
StoredFloats = npt.NDArray[np.float32] | npt.NDArray[np.float64]


def _lengths(seqs: list[Any]) -> npt.NDArray[np.int64]:
    return np.fromiter((-1 if s is None else len(s) for s in seqs), dtype=np.int64, count=len(seqs))


def pad_flat(flat: npt.NDArray[Any], lengths: npt.NDArray[np.int64], fill: float, dtype: Any) -> Any:
    """Scatter a flat array of concatenated sequences into a padded matrix, one row per length."""
    mat = np.full((len(lengths), int(lengths.max(initial=0))), fill, dtype=dtype)
    mat[np.arange(mat.shape[1]) < lengths[:, None]] = flat
    return mat


def pad_int(seqs: list[list[int] | None]) -> tuple[IntMatrix, npt.NDArray[np.int64]]:
    """Padded int matrix (-1 past each length) and lengths (-1 for a missing sequence)."""
    lengths = _lengths(seqs)
    return pad_ids(flat_ints(seqs, lengths), lengths), lengths


def flat_ints(seqs: list[Any], lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The sequences' values concatenated (``lengths``: theirs, -1 for a missing one)."""
    return np.fromiter(chain.from_iterable(s for s in seqs if s), dtype=np.int64, count=int(lengths.clip(0).sum()))


def pad_ids(flat: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]) -> IntMatrix:
    """``flat`` scattered into a matrix padded with -1: int32 unless a value needs int64."""
    dtype = np.int32 if (flat.size == 0 or int(flat.max()) < 2**31 - 1) else np.int64
    mat: IntMatrix = pad_flat(flat, lengths, -1, dtype)
    return mat


def pad_float(seqs: list[list[float | None] | None]) -> tuple[FloatMatrix, npt.NDArray[np.int64]]:
    """Padded float matrix (NaN past each length and for a null value or a non-number) and lengths."""
    lengths = _lengths(seqs)
    flat = np.fromiter(
        (_num(v) for v in chain.from_iterable(s for s in seqs if s)),
        dtype=np.float64,
        count=int(lengths.clip(0).sum()),
    )
    return pad_flat(flat, lengths, np.nan, np.float64), lengths


def narrow(mat: FloatMatrix) -> StoredFloats:
    """``mat`` as float32 when every value, NaN included, is a float32 exactly (engines compute logprobs in
    float32 and print them as such: the held matrix is then half the size), else ``mat`` itself. Lossless
    either way: ``wide`` gives back the same float64 values."""
    small = mat.astype(np.float32)
    return small if np.array_equal(small, mat, equal_nan=True) else mat


def place_floats(out: dict[str, Any], name: str, flat: FloatMatrix) -> None:
    """Before ``flat`` goes into ``out[name]``, a matrix allocated as float32: widen that matrix to float64 once
    some value is no float32 (the rule of ``narrow``, for a matrix filled chunk by chunk)."""
    if out[name].dtype == np.float32 and narrow(flat).dtype != np.float32:
        out[name] = out[name].astype(np.float64)


def wide(values: StoredFloats) -> FloatMatrix:
    """Held floats as float64, for arithmetic (a copy only when they are held as float32)."""
    return np.asarray(values, dtype=np.float64)


def filled(shape: tuple[int, int], fill: float, dtype: Any) -> Any:
    """``np.full(shape, fill, dtype)``, a big matrix in memory mapped here rather than by numpy: numpy asks Linux
    for transparent huge pages for a big array (``madvise``), and on the 2-core development machine (a VM) first
    touching those was 3 to 6 times slower than plain pages: 3 GB took 3.9-6.9 s against 1.1-1.7 s, a quarter
    of reading a million records (docs/performance.md)."""
    mat = _unfilled(shape, dtype)
    mat.fill(fill)
    return mat


_MAPPED_FROM = 1 << 24


def mapped_copy(mat: Any) -> Any:
    """``mat`` copied into memory mapped here, so that letting it go gives it back to the system at once. Why: a
    reader's parts arrive one by one as arrays of a few MB, which the C allocator places in its heap, and memory
    freed in that heap is kept by the process: joining a run's parts (``_widen``) then held the parts and the
    joined matrices together, 1,284 MiB against 823 MiB after reading 200,000 records (docs/performance.md)."""
    if mat.nbytes < _COPIED_FROM:
        return mat
    out = _mapped(mat.shape, mat.dtype)
    out[...] = mat
    return out


_COPIED_FROM = 1 << 20


def _widen(mats: list[Any], fill: float) -> Any:
    """The matrices stacked, padded with ``fill`` to the widest. Consumes ``mats``: each entry is let go
    once it is copied, and a big result's pages are first touched as its rows are written (``_unfilled``), so
    stacking needs the pieces plus about one of them, not the pieces and the whole result."""
    if len(mats) == 1:  # one part is already the whole: no copy
        only, mats[0] = mats[0], _GONE
        return only
    w = max((m.shape[1] for m in mats), default=0)
    dtype = np.result_type(*mats) if mats else np.int32
    out = _unfilled((sum(m.shape[0] for m in mats), w), dtype)
    r = 0
    for k in range(len(mats)):
        m, mats[k] = mats[k], _GONE
        out[r : r + m.shape[0], : m.shape[1]] = m
        out[r : r + m.shape[0], m.shape[1] :] = fill
        r += m.shape[0]
    return out


def _unfilled(shape: tuple[int, int], dtype: Any) -> Any:
    """A matrix whose every value the caller writes: a big one mapped here (``filled``), untouched until then."""
    if shape[0] * shape[1] * np.dtype(dtype).itemsize < _MAPPED_FROM:
        return np.empty(shape, dtype)
    return _mapped(shape, dtype)


def _mapped(shape: tuple[int, ...], dtype: Any) -> Any:
    """An array in anonymous memory mapped here (not empty: a zero-byte mapping cannot be made)."""
    return np.frombuffer(mmap.mmap(-1, int(np.prod(shape)) * np.dtype(dtype).itemsize), dtype=dtype).reshape(shape)


_GONE = np.zeros((0, 0), np.int32)  # stands for a matrix already copied into a stacked one


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else float("nan")
