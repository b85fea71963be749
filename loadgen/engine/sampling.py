"""Turning a step's logits into tokens and logprobs, as vLLM's V1 sampler does.

Why this module exists: greedy decoding is where a low-bit logit difference becomes a different
token, so it must be exactly argmax (lowest id on an exact tie) and logprobs must come from the
raw logits (vLLM's default ``raw_logprobs``), computed row by row so rows never interact.
A sampled row follows vLLM's order (``vllm/v1/sample/sampler.py``): temperature (below 1e-5 is
greedy), then min_p, then top_k, then top_p (``topk_topp_sampler.py``: the smallest tokens whose
ascending cumulative mass stays within 1 - top_p are dropped, the largest always kept), and the
draw is an exponential race, ``argmax(probs / q)`` with ``q`` one Exp(1) per vocabulary entry from the
request's generator: a seeded request's own (``seed``; a child of ``n`` gets ``seed + index``), an
unseeded one the engine's shared generator, so only a seeded draw is reproducible and it depends
on nothing but its logits and its generator. ``prompt_logprobs`` (a teacher-forced re-score) is
vLLM's gather: the given token's logprob and rank, and the top k.
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
    min_p: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: int | None = None
    prompt_logprobs: int | None = None  # per prompt position after the first: its token's logprob and the top k

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW_TEMPERATURE


@dataclass(frozen=True)
class Sampled:
    token_id: int
    logprob: float | None
    top: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class PositionLogprobs:
    """One prompt position's re-score: the given token, its logprob and 1-based rank, and the top k."""

    token_id: int
    logprob: float
    rank: int
    top: tuple[tuple[int, float], ...]


def request_rng(seed: int | None, shared: np.random.Generator) -> np.random.Generator:
    """A seeded request's own generator; an unseeded one draws from the engine's ``shared`` one, as vLLM's
    unseeded rows draw from its global generator: their tokens depend on what else sampled before them."""
    return shared if seed is None else np.random.default_rng(seed)


def top_k_logprobs(row_logprobs: F32, k: int) -> tuple[tuple[int, float], ...]:
    """The k most likely tokens, most likely first, lowest id first on a tie."""
    if k <= 0:
        return ()
    k = min(k, row_logprobs.shape[0])
    candidates = np.argpartition(-row_logprobs, k - 1)[:k]
    order = candidates[np.lexsort((candidates, -row_logprobs[candidates]))]
    return tuple((int(i), float(row_logprobs[i])) for i in order)


def _softmax(z: F32) -> F32:
    e = np.exp(z - z.max(), dtype=np.float32)
    out: F32 = e / e.sum(dtype=np.float32)
    return out


def filtered_probs(logits: F32, params: SamplingParams) -> F32:
    """The distribution a sampled row draws from: temperature, min_p, top_k, top_p in vLLM's order, in fp32."""
    z = logits.astype(np.float32) / np.float32(params.temperature)
    if params.min_p > 0.0:
        probs = _softmax(z)
        z = np.where(probs < probs.max() * np.float32(params.min_p), -np.inf, z).astype(np.float32)
    if 0 < params.top_k < z.shape[0]:
        kth = np.partition(z, -params.top_k)[-params.top_k]
        z = np.where(z < kth, -np.inf, z).astype(np.float32)
    if params.top_p < 1.0:
        order = np.argsort(z, kind="stable")  # ascending, as vLLM sorts
        mass = np.cumsum(_softmax(z[order]), dtype=np.float32)
        drop = mass <= np.float32(1.0 - params.top_p)
        drop[-1] = False  # the most likely token always stays
        z = z.copy()
        z[order[drop]] = -np.inf
    return _softmax(z)


def _sample(logits: F32, params: SamplingParams, rng: np.random.Generator) -> int:
    probs = filtered_probs(logits, params)
    q = rng.standard_exponential(probs.shape[0], dtype=np.float32)
    return int(np.argmax(probs / q))


def sample_row(logits: F32, params: SamplingParams, rng: np.random.Generator) -> Sampled:
    """Pick the next token from one row of logits and report its logprobs if asked."""
    token = int(np.argmax(logits)) if params.greedy else _sample(logits, params, rng)
    if params.logprobs is None:
        return Sampled(token, None, ())
    lp: npt.NDArray[np.float32] = log_softmax(logits[None, :])[0]
    return Sampled(token, float(lp[token]), top_k_logprobs(lp, params.logprobs))


def prompt_logprobs(logits: F32, targets: list[int], k: int) -> tuple[PositionLogprobs, ...]:
    """Row ``i`` of ``logits`` scores ``targets[i]`` (the prompt token after the one it read): its raw logprob,
    its rank (how many tokens are at least as likely, itself included, as vLLM counts) and the top ``k``."""
    lp = log_softmax(logits)
    out = []
    for row, token in zip(lp, targets, strict=True):
        own = row[token]
        out.append(PositionLogprobs(token, float(own), int((row >= own).sum()), top_k_logprobs(row, k)))
    return tuple(out)
