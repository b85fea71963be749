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
    """An endless, seeded stream of background requests for one user."""

    def __init__(self, spec: Background, user_index: int) -> None:
        self.spec = spec
        self._rng = random.Random(spec.seed * 1_000_003 + user_index)
        prefix_rng = random.Random(spec.seed ^ _SHARED_PREFIX_SEED)
        self._prefix = " ".join(prefix_rng.choice(_WORDS) for _ in range(spec.shared_prefix_words))
        self._corpus = corpus(spec.seed)

    def next(self) -> BackgroundRequest:
        rng = self._rng
        lo, hi = self.spec.prompt_words
        n = rng.randint(lo, hi)
        words = " ".join(rng.choices(_WORDS, k=min(n, HEAD_WORDS)))
        if n > HEAD_WORDS:
            rest = n - HEAD_WORDS
            words += " " + self._corpus.words(rng.randrange(CORPUS_WORDS - rest + 1), rest)
        shared = self.spec.shared_prefix_words > 0 and rng.random() < self.spec.shared_prefix_share
        prompt = f"{self._prefix} {words}" if shared else words
        return BackgroundRequest(prompt, rng.randint(*self.spec.max_tokens), shared)
