"""The tiny decoder-only transformer's forward pass over one scheduler step.

Why this module exists: a step is a flat batch of token rows from many sequences (decodes of
one row each, prefills of many), pushed through the linear layers together as vLLM does, so
the GEMM row count, and with it the split-K order, is the whole step's. Attention runs per
group: all decode rows in one flash-decoding launch (split-KV count from batch size and longest
context), each prefill on its own (one split, tiles from the first key). In a mixed step (a prefill of
more than one token beside them) the decode rows go through the varlen kernel instead, unless the
step-kind path is fixed: one split, tiles of 16 keys walked back from the diagonal. Layers: RMSNorm ->
QKV -> RoPE -> attention -> O proj -> residual; RMSNorm -> gated SiLU MLP -> residual.

It writes K/V into the slots it is given and returns logits for the rows that sample, and, for a segment that
asks (``every_row``: a request with ``prompt_logprobs``), logits for each of its rows but the last from an lm_head of
those rows alone, as vLLM computes prompt logits apart from the step's sampling rows; it never schedules,
samples or talks HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadgen.engine.kernels import F32, F64, KV_TILE, attention, rms_norm, silu_mul, split_k_matmul, to_bf16
from loadgen.engine.kvcache import SlotKV
from loadgen.engine.plan import (
    VARLEN_KV_TILE,
    InvariantPaths,
    StepPlan,
    kv_split_count,
    plan_step,
    split_k_count,
    varlen_decodes,
)
from loadgen.engine.weights import LayerWeights, Weights


@dataclass(frozen=True)
class Segment:
    """The rows one sequence contributes to a step: tokens at positions start..start+len-1."""

    slot: int
    token_ids: list[int]
    start: int
    wants_logits: bool
    every_row: bool = False  # logits of every row but the last too (a teacher-forced re-score)


def _rope(x: F32, pos: npt.NDArray[np.int64], cos: F32, sin: F32, heads: int) -> F32:
    """Rotary embedding on (rows, heads*head_dim) with the rotate-half convention."""
    rows, d = x.shape
    xh = x.reshape(rows, heads, d // heads)
    half = xh.shape[-1] // 2
    c = cos[pos][:, None, :]
    s = sin[pos][:, None, :]
    x1, x2 = xh[..., :half], xh[..., half:]
    out = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)
    return to_bf16(out.reshape(rows, d))


class TinyModel:
    """Forward pass; holds weights and the KV slots, and nothing else."""

    def __init__(self, weights: Weights, kv: SlotKV, paths: InvariantPaths, logit_scale: float) -> None:
        self.w = weights
        self.kv = kv
        self.paths = paths
        self.logit_scale = np.float32(logit_scale)
        self.scale = np.float32(1.0 / np.sqrt(weights.config.head_dim))

    def forward(self, segments: list[Segment]) -> F32:
        """Run one step; returns logits (n_sampling_segments, vocab) in segment order."""
        return self.forward_rows(segments)[0]

    def forward_rows(self, segments: list[Segment]) -> tuple[F32, list[F32 | None]]:
        """Run one step; the sampling rows' logits as ``forward``'s, and per segment the logits of each of its
        rows but the last (whose logits are its sampling row's) where it asked (``every_row``), else None."""
        ids = np.fromiter((t for s in segments for t in s.token_ids), dtype=np.int64)
        pos = np.concatenate([np.arange(s.start, s.start + len(s.token_ids)) for s in segments])
        plan = plan_step(len(ids), self.paths)
        x = self.w.embed[ids]
        for li, layer in enumerate(self.w.layers):
            x = self._layer(li, layer, x, pos, segments, plan)
        ends = np.cumsum([len(s.token_ids) for s in segments]) - 1
        pick = np.array([e for s, e in zip(segments, ends, strict=True) if s.wants_logits], dtype=np.int64)
        normed = rms_norm(x, self.w.final_norm, plan.norm_split)
        every: list[F32 | None] = [
            self._logits(normed[e + 1 - len(s.token_ids) : e]) if s.every_row else None
            for s, e in zip(segments, ends, strict=True)
        ]
        return self._logits(normed[pick]), every

    def _logits(self, hidden: F32) -> F32:
        """The lm_head over ``hidden``'s rows, its split count from their number, as one GEMM launch's."""
        cfg = self.w.config
        vocab = self.w.lm_head.shape[1]
        z = split_k_matmul(hidden, self.w.lm_head, split_k_count(len(hidden), vocab, cfg.d_model, self.paths.matmul))
        return (z * self.logit_scale + self.w.prior[None, :]).astype(np.float32)

    def _linear(self, x: F32, w: npt.NDArray[np.float64], plan: StepPlan) -> F32:
        k, n = w.shape
        return to_bf16(split_k_matmul(x, w, plan.k_splits(n, k)))

    def _layer(
        self,
        li: int,
        lw: LayerWeights,
        x: F32,
        pos: npt.NDArray[np.int64],
        segments: list[Segment],
        plan: StepPlan,
    ) -> F32:
        cfg = self.w.config
        d = cfg.d_model
        h = rms_norm(x, lw.attn_norm, plan.norm_split)
        qkv = self._linear(h, lw.wqkv, plan)
        q = _rope(qkv[:, :d], pos, self.w.rope_cos, self.w.rope_sin, cfg.n_heads)
        k = _rope(qkv[:, d : 2 * d], pos, self.w.rope_cos, self.w.rope_sin, cfg.n_heads)
        v = qkv[:, 2 * d :]
        attn = self._attend(li, q, k, v, segments)
        x = to_bf16(x + self._linear(attn, lw.wo, plan))
        h = rms_norm(x, lw.mlp_norm, plan.norm_split)
        gate_up = self._linear(h, lw.w_gate_up, plan)
        act = silu_mul(gate_up[:, : cfg.d_ffn], gate_up[:, cfg.d_ffn :])
        return to_bf16(x + self._linear(act, lw.w_down, plan))

    def _attend(self, li: int, q: F32, k: F32, v: F32, segments: list[Segment]) -> F32:
        cfg = self.w.config
        heads, hd = cfg.n_heads, cfg.head_dim
        kc, vc = self.kv.k[li], self.kv.v[li]
        out = np.empty_like(q)
        decode_rows: list[int] = []
        decode_segs: list[Segment] = []
        row = 0
        mixed = False
        for seg in segments:
            n = len(seg.token_ids)
            kc[seg.slot, :, seg.start : seg.start + n, :] = k[row : row + n].reshape(n, heads, hd).transpose(1, 0, 2)
            vc[seg.slot, :, seg.start : seg.start + n, :] = v[row : row + n].reshape(n, heads, hd).transpose(1, 0, 2)
            if n == 1:
                decode_rows.append(row)
                decode_segs.append(seg)
            else:
                mixed = True
                out[row : row + n] = self._prefill_attention(q[row : row + n], seg, kc, vc)
            row += n
        if decode_segs and varlen_decodes(mixed, self.paths):
            out[decode_rows] = self._decode_attention(q[decode_rows], decode_segs, kc, vc, varlen=True)
        elif decode_segs:
            out[decode_rows] = self._decode_attention(q[decode_rows], decode_segs, kc, vc)
        return to_bf16(out)

    def _prefill_attention(self, q: F32, seg: Segment, kc: F64, vc: F64) -> F32:
        heads, hd = self.w.config.n_heads, self.w.config.head_dim
        n = q.shape[0]
        end = seg.start + n
        lk = -(-end // KV_TILE) * KV_TILE
        qh = q.reshape(n, heads, hd).transpose(1, 0, 2)[None]
        q_pos = np.arange(seg.start, end, dtype=np.int64)[None]
        o = attention(
            qh,
            kc[seg.slot : seg.slot + 1, :, :lk],
            vc[seg.slot : seg.slot + 1, :, :lk],
            q_pos,
            np.array([end], dtype=np.int64),
            1,
            self.scale,
        )
        rows: F32 = o[0].transpose(1, 0, 2).reshape(n, heads * hd)
        return rows

    def _decode_attention(self, q: F32, segs: list[Segment], kc: F64, vc: F64, varlen: bool = False) -> F32:
        """One-token rows: the decode kernel (split-KV from the batch's shape), or with ``varlen`` the varlen
        kernel a mixed step runs them through (one split, 16-key tiles walked back from the diagonal)."""
        heads, hd = self.w.config.n_heads, self.w.config.head_dim
        b = len(segs)
        slots = np.array([s.slot for s in segs], dtype=np.int64)
        order = np.argsort(slots)
        lens = np.array([segs[i].start + 1 for i in order], dtype=np.int64)
        tile = VARLEN_KV_TILE if varlen else KV_TILE
        tiles = -(-int(lens.max()) // tile)
        lk = tiles * tile
        sorted_slots = slots[order]
        if sorted_slots[0] == 0 and sorted_slots[-1] == b - 1:
            k_view, v_view = kc[:b, :, :lk], vc[:b, :, :lk]
        else:
            k_view, v_view = kc[sorted_slots, :, :lk], vc[sorted_slots, :, :lk]
        splits = 1 if varlen else kv_split_count(b, heads, tiles, self.paths.attention)
        o = attention(
            q[order].reshape(b, heads, 1, hd),
            k_view,
            v_view,
            (lens - 1)[:, None],
            lens,
            splits,
            self.scale,
            kv_tile=tile,
            reverse=varlen,
        )
        out = np.empty((b, heads * hd), dtype=np.float32)
        out[order] = o.reshape(b, heads * hd)
        return out
