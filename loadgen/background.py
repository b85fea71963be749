"""Seeded background prompts: varied lengths, an optional shared prefix, reproducible per user.

Why: background traffic exists to vary the engine's batch (sizes, context lengths, prefix-cache
hits); a seed makes two runs send the same mix. It sits on the generator's hot path (one prompt per
background request, thousands a second), so a prompt costs O(1) however long it is: a few random
head words followed by a slice of a seeded word corpus built once per process. The random head
keeps two prompts from sharing a prefix by accident (a slice start repeats; a four-word head of
~230 words almost never does), so prefix-cache hits come only from ``shared_prefix_share``.
Pure: no I/O, no Locust.
"""

from __future__ import annotations

import random
from array import array
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate

import numpy as np

from loadgen.scenario import MAX_PROMPT_WORDS, Background

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
_CORPUS_SEED = 0xC0DE
CORPUS_WORDS = 1 << 18
assert CORPUS_WORDS > MAX_PROMPT_WORDS, "a prompt's corpus slice must fit in the corpus"
HEAD_WORDS = 4


@dataclass(frozen=True, slots=True)
class Corpus:
    """Seeded words joined by single spaces, and where each word starts (plus one past the end)."""

    text: str
    starts: array[int]

    def words(self, first: int, count: int) -> str:
        """``count`` consecutive words from word ``first`` on, space-separated."""
        return self.text[self.starts[first] : self.starts[first + count] - 1]


@lru_cache(maxsize=4)
def corpus(seed: int) -> Corpus:
    words = random.Random(seed ^ _CORPUS_SEED).choices(_WORDS, k=CORPUS_WORDS)
    starts = array("L", accumulate((len(w) + 1 for w in words), initial=0))
    return Corpus(" ".join(words) + " ", starts)


@dataclass(frozen=True, slots=True)
class BackgroundRequest:
    prompt: str
    max_tokens: int
    shared_prefix: bool


class BackgroundPrompts:
    """An endless, seeded stream of background requests for one user.

    The random numbers are drawn ``BATCH`` requests at a time with numpy (one call per field, not
    five Python calls per request); only the strings are made per request."""

    BATCH = 64

    def __init__(self, spec: Background, user_index: int) -> None:
        self.spec = spec
        self._rng = np.random.default_rng([spec.seed % 2**64, user_index])
        prefix_rng = random.Random(spec.seed ^ _SHARED_PREFIX_SEED)
        self._prefix = " ".join(prefix_rng.choice(_WORDS) for _ in range(spec.shared_prefix_words))
        self._corpus = corpus(spec.seed)
        self._drawn: list[tuple[int, int, list[int], bool, int]] = []  # next request last

    def _draw(self) -> None:
        rng, spec, size = self._rng, self.spec, self.BATCH
        words = rng.integers(*spec.prompt_words, endpoint=True, size=size)
        starts = rng.integers(0, CORPUS_WORDS - np.maximum(words - HEAD_WORDS, 0), endpoint=True)
        heads = rng.integers(0, len(_WORDS), size=(size, HEAD_WORDS))
        shared = rng.random(size) < spec.shared_prefix_share
        if not spec.shared_prefix_words:
            shared[:] = False
        max_tokens = rng.integers(*spec.max_tokens, endpoint=True, size=size)
        drawn = zip(words.tolist(), starts.tolist(), heads.tolist(), shared.tolist(), max_tokens.tolist(), strict=True)
        self._drawn = list(drawn)[::-1]

    def next(self) -> BackgroundRequest:
        if not self._drawn:
            self._draw()
        n, start, head, shared, max_tokens = self._drawn.pop()
        words = " ".join([_WORDS[i] for i in head[:n]])
        if n > HEAD_WORDS:
            words += " " + self._corpus.words(start, n - HEAD_WORDS)
        prompt = f"{self._prefix} {words}" if shared else words
        return BackgroundRequest(prompt, max_tokens, shared)
