"""Seeded background prompts: varied lengths, an optional shared prefix, reproducible per user.

Why: background traffic exists to vary the engine's batch (sizes, context lengths, prefix-cache
hits); a seed makes two runs send the same mix. Pure: no I/O, no Locust.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from loadgen.scenario import Background

_WORD_TEXT = """
time year people way day man thing woman life child world school state family student group country
problem hand part place case week company system program question work government number night point
home water room mother area money story fact month lot right study book eye job word business issue
side kind head house service friend father power hour game line end member law car city community
name president team minute idea kid body information back parent face others level office door
health person art war history party result change morning reason research girl guy moment air
teacher force education river harbour light garden market winter summer road music paper table
window morning letter voice field island mountain bridge station engine ship village quiet small
large early late bright dark warm cold green old new long short strong simple careful walks builds
finds gives tells brings holds keeps turns shows hears plays moves lives believes
"""
_WORDS = _WORD_TEXT.split()

_SHARED_PREFIX_SEED = 0x5EED


@dataclass(frozen=True, slots=True)
class BackgroundRequest:
    prompt: str
    max_tokens: int
    shared_prefix: bool


class BackgroundPrompts:
    """An endless, seeded stream of background requests for one user."""

    def __init__(self, spec: Background, user_index: int) -> None:
        self.spec = spec
        self._rng = random.Random(spec.seed * 1_000_003 + user_index)
        prefix_rng = random.Random(spec.seed ^ _SHARED_PREFIX_SEED)
        self._prefix = " ".join(prefix_rng.choice(_WORDS) for _ in range(spec.shared_prefix_words))

    def next(self) -> BackgroundRequest:
        rng = self._rng
        lo, hi = self.spec.prompt_words
        words = " ".join(rng.choices(_WORDS, k=rng.randint(lo, hi)))
        shared = self.spec.shared_prefix_words > 0 and rng.random() < self.spec.shared_prefix_share
        prompt = f"{self._prefix} {words}" if shared else words
        return BackgroundRequest(prompt, rng.randint(*self.spec.max_tokens), shared)
