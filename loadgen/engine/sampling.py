"""Turning a step's logits into tokens and logprobs.

Why this module exists: greedy decoding is where a low-bit logit difference becomes a different
token, so it must be exactly argmax (lowest id on an exact tie) and logprobs must come from the
raw logits (vLLM's default ``raw_logprobs``), computed row by row so rows never interact.
Temperature sampling uses a per-request generator seeded from ``seed`` (or the OS when absent).
Pure functions apart from the generator a caller passes in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadgen.engine.kernels import F32, log_softmax

GREEDY_BELOW_TEMPERATURE = 1e-5


@dataclass(frozen=True)
class SamplingParams:
    """What a request asks of the sampler and the stop checks."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW_TEMPERATURE


@dataclass(frozen=True)
class Sampled:
    token_id: int
    logprob: float | None
    top: tuple[tuple[int, float], ...]


def top_k_logprobs(row_logprobs: F32, k: int) -> tuple[tuple[int, float], ...]:
    """The k most likely tokens, most likely first, lowest id first on a tie."""
    if k <= 0:
        return ()
    k = min(k, row_logprobs.shape[0])
    candidates = np.argpartition(-row_logprobs, k - 1)[:k]
    order = candidates[np.lexsort((candidates, -row_logprobs[candidates]))]
    return tuple((int(i), float(row_logprobs[i])) for i in order)


def _sample(logits: F32, params: SamplingParams, rng: np.random.Generator) -> int:
    scaled = logits.astype(np.float64) / params.temperature
    if 0 < params.top_k < scaled.shape[0]:
        kth = np.partition(scaled, -params.top_k)[-params.top_k]
        scaled = np.where(scaled >= kth, scaled, -np.inf)
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    if params.top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        keep = np.cumsum(probs[order]) - probs[order] < params.top_p
        mask = np.zeros_like(probs, dtype=bool)
        mask[order[keep]] = True
        probs = np.where(mask, probs, 0.0)
        probs /= probs.sum()
    return int(rng.choice(probs.shape[0], p=probs))


def sample_row(logits: F32, params: SamplingParams, rng: np.random.Generator) -> Sampled:
    """Pick the next token from one row of logits and report its logprobs if asked."""
    token = int(np.argmax(logits)) if params.greedy else _sample(logits, params, rng)
    if params.logprobs is None:
        return Sampled(token, None, ())
    lp: npt.NDArray[np.float32] = log_softmax(logits[None, :])[0]
    return Sampled(token, float(lp[token]), top_k_logprobs(lp, params.logprobs))
