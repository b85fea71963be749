"""Weights of the tiny model, generated from a seed so that every install serves the same model.

Why this module exists: no download, and the kernels' exactness argument needs weights on a
bf16 grid of bounded range (|w| in [s * 2**-5, s] or 0, s a power of two per matrix). Weights
are drawn from PCG64 uniform doubles (a stream numpy keeps stable), scaled to the usual
1/sqrt(fan_in) spread, then put on that grid. Also builds the fixed unigram prior over the
vocabulary and the RoPE tables. Pure: seed and config in, arrays out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from loadgen.engine.kernels import F32, F64, to_bf16
from loadgen.engine.tokenizer import BYTE_BASE, EOS_ID, PUNCTUATION, Tokenizer

ROPE_BASE: Final = 10000.0


@dataclass(frozen=True)
class ModelConfig:
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    d_ffn: int = 256
    max_model_len: int = 512

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: F32
    wqkv: F64
    wo: F64
    mlp_norm: F32
    w_gate_up: F64
    w_down: F64


@dataclass(frozen=True)
class Weights:
    config: ModelConfig
    embed: F32
    layers: tuple[LayerWeights, ...]
    final_norm: F32
    lm_head: F64
    prior: F32
    rope_cos: F32
    rope_sin: F32


def _grid_matrix(rng: np.random.Generator, fan_in: int, fan_out: int) -> F64:
    bound = np.sqrt(3.0 / fan_in)
    raw = (rng.random((fan_in, fan_out)) * 2.0 - 1.0) * bound
    scale = 2.0 ** np.ceil(np.log2(bound))
    clipped = np.clip(raw, -scale, scale).astype(np.float32)
    grid = to_bf16(clipped / np.float32(scale)) * np.float32(scale)
    grid[np.abs(grid) < scale * 2.0**-5] = 0.0
    return grid.astype(np.float64)


def _norm_gain(rng: np.random.Generator, d: int) -> F32:
    return to_bf16((1.0 + 0.25 * (rng.random(d) - 0.5)).astype(np.float32))


def unigram_prior(tok: Tokenizer) -> F32:
    """Fixed log-prior: Zipf over words in list order, punctuation common, bytes and specials rare."""
    prior = np.full(tok.vocab_size, -12.0, dtype=np.float32)
    prior[EOS_ID] = -7.0
    prior[BYTE_BASE : BYTE_BASE + 256] = -11.0
    ranks: dict[str, int] = {}
    for piece, idx in tok.piece_ids.items():
        word = piece.strip().lower()
        if piece.strip() in PUNCTUATION:
            prior[idx] = -5.0 if piece.startswith(" ") else -3.5
            continue
        rank = ranks.setdefault(word, len(ranks))
        base = -1.2 * np.log(rank + 2.0)
        prior[idx] = base if piece.startswith(" ") and piece[1:].islower() else base - 2.5
    return prior


def _rope_tables(cfg: ModelConfig) -> tuple[F32, F32]:
    half = cfg.head_dim // 2
    inv_freq = ROPE_BASE ** (-np.arange(half, dtype=np.float64) / half)
    angles = np.arange(cfg.max_model_len, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def generate_weights(tok: Tokenizer, seed: int, cfg: ModelConfig) -> Weights:
    """All weights of the model for ``seed``; same seed, same bits, on every machine."""
    rng = np.random.default_rng(seed)
    d = cfg.d_model
    embed = to_bf16(((rng.random((tok.vocab_size, d)) * 2.0 - 1.0) * np.sqrt(3.0)).astype(np.float32))
    layers = tuple(
        LayerWeights(
            attn_norm=_norm_gain(rng, d),
            wqkv=_grid_matrix(rng, d, 3 * d),
            wo=_grid_matrix(rng, d, d),
            mlp_norm=_norm_gain(rng, d),
            w_gate_up=_grid_matrix(rng, d, 2 * cfg.d_ffn),
            w_down=_grid_matrix(rng, cfg.d_ffn, d),
        )
        for _ in range(cfg.n_layers)
    )
    cos, sin = _rope_tables(cfg)
    return Weights(
        config=cfg,
        embed=embed,
        layers=layers,
        final_norm=_norm_gain(rng, d),
        lm_head=_grid_matrix(rng, d, tok.vocab_size),
        prior=unigram_prior(tok),
        rope_cos=cos,
        rope_sin=sin,
    )
