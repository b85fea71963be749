"""The offload action's flush: filler prompts until the GPU prefix cache has turned over.

Why: ``cache = "offload"`` must make a canary's prompt KV leave the GPU but stay in the offload tier
(docs/design.md, "Cache actions"). Where the GPU-only reset cannot be used (other requests run, or the engine
refused it), the way left is to push the canary's blocks out: distinct prompts, each with a fresh
``cache_salt`` (so no filler hits another's blocks or the canary's), ``max_tokens`` 1, until their prompt tokens
total at least ``FLUSH_FACTOR`` times the GPU cache (``num_gpu_blocks`` x ``block_size``, read once by the probe:
``loadgen.runs.cache_size``). An engine with an offload tier stores the evicted blocks there; the canary then
loads them back. Each filler is counted by its answer's ``usage.prompt_tokens``, else by its words (a lower bound
on its tokens for any tokenizer that splits at spaces), so a flush never stops short by an estimate; fillers are
about half the endpoint's context (``max_model_len``), sized by the tokens per word the engine counts.

The fillers go through the load path's client (``loadgen.load.client.send_canary``) one at a time; nothing of
them is recorded but the total, the canary record's ``flush_tokens``. Prompts are drawn from a seeded generator:
two runs send the same fillers. Must not write files or know Locust.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from loadgen.core.manifest import Manifest
from loadgen.core.scenario import Scenario
from loadgen.core.wire import Features, Kind, build_body
from loadgen.core.wire.server_config import gpu_cache_tokens
from loadgen.core.wire.urls import api_path
from loadgen.load.background import WORDS
from loadgen.load.client import EndpointClient, send_canary
from loadgen.runs.context import context_of
from loadgen.runs.prepare import api_key_of

FLUSH_FACTOR = 1.25  # of the GPU cache: LRU eviction leaves nothing of what was there before
DEFAULT_FILLER_TOKENS = 1024  # a filler's length where the endpoint states no context (max_model_len)
MIN_FILLER_WORDS = 16  # one full block and then some: shorter fillers would cache nothing
MAX_FAILURES = 3  # fillers failing one after another: the flush ends there, short, and says so by its total
_FILLER_SEED = 0xF1054


@dataclass(frozen=True)
class FlushSize:
    """How much to send: ``target_tokens`` in all, in fillers of about ``filler_tokens`` each."""

    target_tokens: int
    filler_tokens: int

    @classmethod
    def of(cls, gpu_cache_tokens: int, max_model_len: int | None) -> FlushSize:
        """``FLUSH_FACTOR`` times the GPU cache, in fillers of half the endpoint's context, none longer than the
        whole flush."""
        target = math.ceil(FLUSH_FACTOR * gpu_cache_tokens)
        tokens = DEFAULT_FILLER_TOKENS if max_model_len is None else max_model_len // 2
        return cls(target, max(MIN_FILLER_WORDS, min(tokens, target)))


class Sent(NamedTuple):
    """A filler's answer: its prompt tokens, and whether the engine counted them (else: its words)."""

    tokens: int
    counted: bool


def filler_prompt(rng: random.Random, words: int) -> str:
    """``words`` words drawn from ``rng``: no two fillers of a run share a prefix but by a chance of 1 in 154^4."""
    return " ".join(rng.choices(WORDS, k=words))


def fill(size: FlushSize, rng: random.Random, send: Callable[[str], Sent | None], stopping: Callable[[], bool]) -> int:
    """Send fillers through ``send`` (a prompt in; its tokens out, None where the request failed) until their
    tokens reach ``size.target_tokens``, ``MAX_FAILURES`` fail in a row, or ``stopping()``; the tokens sent.
    A word is one token or several (a word a tokenizer lacks is spelt in pieces), so the first filler has
    half ``size.filler_tokens`` words and the next are sized by the tokens per word the engine last counted;
    a failed one (too long for the context, say) halves them."""
    total, failures, words = 0, 0, max(MIN_FILLER_WORDS, size.filler_tokens // 2)
    while total < size.target_tokens and failures < MAX_FAILURES and not stopping():
        sent = send(filler_prompt(rng, words))
        if sent is None:
            failures, words = failures + 1, max(MIN_FILLER_WORDS, words // 2)
            continue
        failures, total = 0, total + sent.tokens
        if sent.counted:
            words = max(MIN_FILLER_WORDS, size.filler_tokens * words // max(sent.tokens, 1))
    return total


@dataclass
class Flusher:
    """One run's flushes: where fillers go, how much, and the seeded generator their prompts come from."""

    base_url: str
    model: str
    size: FlushSize
    api_key: str | None = None
    seed: int = 0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed ^ _FILLER_SEED)

    def __call__(self, client: EndpointClient, kind: Kind, stopping: Callable[[], bool]) -> int:
        """Flush through ``client`` in ``kind``'s dialect (the canary's own, which the probe settled); the filler
        tokens the engine counted."""
        path = api_path(self.base_url, kind)

        def send(prompt: str) -> Sent | None:
            chat = kind == "chat"
            body = build_body(
                kind,
                model=self.model,
                prompt=None if chat else prompt,
                messages=[{"role": "user", "content": prompt}] if chat else None,
                max_tokens=1,
                seed=0,
                stream=False,
                features=Features(),
                extra={"cache_salt": uuid.uuid4().hex},
            )
            out = send_canary(client, path, kind, body, uuid.uuid4().hex, secret=self.api_key)
            if not out.ok:
                return None
            usage = out.completion.usage if out.completion is not None else None
            said = usage.get("prompt_tokens") if usage else None
            if type(said) is int and said > 0:
                return Sent(said, True)
            return Sent(len(prompt.split()), False)

        return fill(self.size, self.rng, send, stopping)


def flush_facts(m: Manifest) -> tuple[int | None, int | None]:
    """The GPU cache's tokens and the context per request, as the probe kept them in ``m``."""
    info = m.server.get("config", {}).get("info_series", {})
    return gpu_cache_tokens(info), context_of(m.server.get("models"), str(m.endpoint.model))


def flusher_for(scenario: Scenario, base_url: str, model: str, facts: tuple[int | None, int | None]) -> Flusher | None:
    """The run's flush where a canary has ``cache = "offload"`` and the GPU cache's size is known (the run was
    refused at its start otherwise: ``loadgen.runs.cache_size``); None otherwise."""
    cache, context = facts
    if cache is None or not any(c.cache == "offload" for c in scenario.canaries):
        return None
    api_key = api_key_of(scenario, base_url)
    return Flusher(base_url, model, FlushSize.of(cache, context), api_key, seed=scenario.background.seed)
