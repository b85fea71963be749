"""Numerical kernels of the embedded engine: bf16 storage, split reductions, shape-chosen orders.

Why this module exists: the engine must be batch-variant for the same reason GPU engines are,
floating-point reduction order, and batch-invariant on request. Every kernel here splits its
reduction the way a GPU kernel would (split-K for matmul, split-KV for attention, a split
reduction for RMSNorm) and merges the partial results in a fixed order for a given split count:
attention and RMSNorm partials in fp32, split-K partials into the bf16 output (atomic-add
split-K), which is what makes a split-count change visible after bf16 storage. The split
count is an argument: :mod:`loadgen.engine.plan` picks it from the step's shape (default mode)
or fixes it (batch-invariant mode).

How order-dependence is kept *only* where it is meant to be: activations are stored as bf16
with a narrowed exponent range (:func:`to_bf16` flushes below 2**-12 and saturates at 2**8) and
weights sit on a bf16 grid of bounded range, so every tile-level dot product (one split's worth
of a matmul, one KV tile of attention) is exact in float64 whatever order BLAS uses. Rounding
that exact value to fp32 is the tile's fp32 accumulator; the merges of tiles and splits are
explicit operations written out below. Nothing here depends on BLAS blocking or threads.

Pure: numpy in, numpy out; no state, no I/O.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

FTZ_BELOW: Final = np.float32(2.0**-12)
SATURATE_AT: Final = np.float32(2.0**8)
KV_TILE: Final = 32
_SHIFT: Final = np.uint32(16)
_ONE: Final = np.uint32(1)
_HALF_MINUS_ONE: Final = np.uint32(0x7FFF)
_KEEP_HIGH: Final = np.uint32(0xFFFF0000)
_EXP_MASK: Final = np.uint32(0x7F800000)
_FTZ_EXP: Final = np.float32(2.0**-12).view(np.uint32) & np.uint32(0x7F800000)
NEG_INF: Final = np.float32(-np.inf)


def to_bf16(x: F32) -> F32:
    """Round fp32 to the nearest bf16 (ties to even), flush tiny values, saturate large ones.

    The result is float32 holding bf16 values, as a GPU stores activations between ops.
    """
    clipped = np.minimum(np.maximum(x, -SATURATE_AT, dtype=np.float32), SATURATE_AT)
    bits = clipped.view(np.uint32)
    rounded = bits + ((bits >> _SHIFT) & _ONE)
    rounded += _HALF_MINUS_ONE
    rounded &= _KEEP_HIGH
    rounded *= (rounded & _EXP_MASK) >= _FTZ_EXP
    return rounded.view(np.float32)


def split_k_matmul(x: F32, w64: F64, splits: int) -> F32:
    """``x @ w`` with the K dimension cut into ``splits`` tiles, reduced into a bf16 output.

    ``x`` is (M, K) bf16-valued; ``w64`` is the (K, N) weight as float64. Each split accumulates
    its share of K in fp32 (exact in float64, rounded once), and the splits are reduced into
    the bf16 output tensor in split order, as an atomic-add split-K kernel does: the partial
    is stored as bf16 and every add is rounded to bf16. With one split (the fixed order of
    batch-invariant mode) the result is the fp32-accumulated dot product. The output is fp32
    holding bf16 values when ``splits > 1``; callers round to bf16 anyway.
    """
    m, k = x.shape
    if k % splits:
        raise ValueError(f"split_k_matmul: K={k} is not divisible by splits={splits}")
    kc = k // splits
    x64 = x.astype(np.float64)
    if splits == 1:
        return (x64 @ w64).astype(np.float32)
    xs = x64.reshape(m, splits, kc).transpose(1, 0, 2)
    ws = w64.reshape(splits, kc, w64.shape[1])
    partials: F32 = to_bf16(np.matmul(xs, ws).astype(np.float32))
    acc: F32 = partials[0]
    for j in range(1, splits):
        acc = to_bf16(acc + partials[j])
    return acc


def _tree_sum_last(v: F32) -> F32:
    """Butterfly (warp-shuffle style) sum over a power-of-two last axis, in fp32."""
    while v.shape[-1] > 1:
        half = v.shape[-1] // 2
        v = v[..., :half] + v[..., half:]
    return v[..., 0]


def rms_norm(x: F32, gamma: F32, split: bool, eps: float = 1e-5) -> F32:
    """RMSNorm of each row of ``x`` (M, D), D = 32 * lanes-per-thread; output bf16-valued.

    ``split=False``: one block per row; each of 32 lanes sums its strided elements in order,
    then a butterfly over the lanes. ``split=True`` (what small batches use to fill the GPU):
    the row is cut into contiguous 32-wide chunks, each reduced by a butterfly, and the chunk
    sums are added left to right. Squares of bf16 values are exact in fp32; only the order of
    the additions differs between the two paths.
    """
    m, d = x.shape
    sq = (x * x).reshape(m, d // 32, 32)
    if split:
        chunk = _tree_sum_last(sq)
        total = chunk[:, 0].copy()
        for j in range(1, chunk.shape[1]):
            total += chunk[:, j]
    else:
        lanes = sq[:, 0, :].copy()
        for j in range(1, sq.shape[1]):
            lanes += sq[:, j, :]
        total = _tree_sum_last(lanes)
    mean = total / np.float32(d)
    inv = np.float32(1.0) / np.sqrt(mean + np.float32(eps))
    return to_bf16((x * inv[:, None]) * gamma[None, :])


def attention(
    q: F32,
    k: F64,
    v: F64,
    q_pos: npt.NDArray[np.int64],
    kv_len: npt.NDArray[np.int64],
    splits: int,
    scale: np.float32,
    kv_tile: int = KV_TILE,
    reverse: bool = False,
) -> F32:
    """Causal attention with FlashAttention tiling and flash-decoding split-KV; output fp32.

    Shapes: ``q`` (B, H, Lq, Dh); ``k``/``v`` (B, H, Lk, Dh), float64 holding bf16 values, with Lk a multiple of
    ``kv_tile`` (rows past a sequence's length are padding); ``q_pos`` (B, Lq) absolute positions of the
    queries (-1 for padding rows); ``kv_len`` (B,) valid keys. Key j is visible to a query at
    position p when j <= p and j < kv_len.

    The KV tiles are dealt to ``splits`` splits of ceil(tiles / splits) tiles each (so where a
    tile lands depends on the longest context in the batch, as in FlashAttention). Inside a
    split the tiles are walked in order with online-softmax rescaling; P is rounded to bf16
    before the PV product, as the kernel does. The splits are then merged in fp32 with their
    log-sum-exp weights. Masked tiles contribute exact zeros, so padding never changes a row;
    the split count does. ``kv_tile`` (keys per tile) and ``reverse`` (walk a split's tiles from the last to
    the first, as FlashAttention-2's forward kernel walks key blocks back from the diagonal) pick another
    kernel's order: the running maximum, against which P is rounded, then grows in another sequence.
    """
    b, h, lq, dh = q.shape
    lk = k.shape[2]
    tiles = lk // kv_tile
    per_split = -(-tiles // splits)
    key_idx = np.arange(lk, dtype=np.int64)
    visible = (key_idx[None, None, :] <= q_pos[:, :, None]) & (key_idx[None, None, :] < kv_len[:, None, None])
    q64 = q.astype(np.float64)
    scores = (np.matmul(q64, k.transpose(0, 1, 3, 2))).astype(np.float32) * scale
    scores = np.where(visible[:, None, :, :], scores, NEG_INF)

    shape = (b, h, lq)
    m_s = np.full((splits, *shape), NEG_INF, dtype=np.float32)
    l_s = np.zeros((splits, *shape), dtype=np.float32)
    o_s = np.zeros((splits, *shape, dh), dtype=np.float32)
    for s in range(splits):
        first = s * per_split
        walk = range(first, min(first + per_split, tiles))
        for t in reversed(walk) if reverse else walk:
            lo, hi = t * kv_tile, (t + 1) * kv_tile
            tile = scores[..., lo:hi]
            tile_max = tile.max(axis=-1)
            m_new = np.maximum(m_s[s], tile_max)
            safe_m = np.where(np.isfinite(m_new), m_new, np.float32(0.0))
            p = to_bf16(np.exp(tile - safe_m[..., None]))
            alpha = np.exp(m_s[s] - safe_m)
            p64 = p.astype(np.float64)
            l_tile = p64.sum(axis=-1).astype(np.float32)
            o_tile = np.matmul(p64, v[:, :, lo:hi, :]).astype(np.float32)
            l_s[s] = l_s[s] * alpha + l_tile
            o_s[s] = o_s[s] * alpha[..., None] + o_tile
            m_s[s] = m_new
    if splits == 1:
        return _normalise(o_s[0], l_s[0])
    m_all = m_s.max(axis=0)
    m_all = np.where(np.isfinite(m_all), m_all, np.float32(0.0))
    l_acc = np.zeros(shape, dtype=np.float32)
    o_acc = np.zeros((*shape, dh), dtype=np.float32)
    for s in range(splits):
        weight = np.exp(m_s[s] - m_all)
        l_acc += l_s[s] * weight
        o_acc += o_s[s] * weight[..., None]
    return _normalise(o_acc, l_acc)


def _normalise(o: F32, l_sum: F32) -> F32:
    """o / l per row; rows with no visible key (padding) come out as zeros, not NaN."""
    safe = np.where(l_sum > 0, l_sum, np.float32(1.0))
    return (o / safe[..., None]).astype(np.float32)


def silu_mul(gate: F32, up: F32) -> F32:
    """SiLU(gate) * up, elementwise in fp32, stored as bf16."""
    act: F32 = ((gate / (np.float32(1.0) + np.exp(-gate))) * up).astype(np.float32)
    return to_bf16(act)


def log_softmax(logits: F32) -> F32:
    """Row-wise log-softmax in fp32; each row reduced on its own, so rows never interact."""
    m = logits.max(axis=-1, keepdims=True)
    shifted = logits - m
    lse = np.log(np.exp(shifted).sum(axis=-1, keepdims=True, dtype=np.float32))
    out: F32 = (shifted - lse).astype(np.float32)
    return out
