"""Seeded background request bodies: varied lengths, an optional shared prefix, reproducible per user.

Why: background traffic exists to vary the engine's batch (sizes, context lengths, prefix-cache
hits); a seed makes two runs send the same mix. It is also the generator's hottest path (one body
per background request, thousands a second), so a body is assembled as bytes in O(1) however long
its prompt is: a request body serialised once per user around two marks (prompt, max_tokens),
a few random head words, and a slice of a seeded word corpus built once per process. Every word is
lowercase ASCII, so the bytes need no JSON escaping; ``prompt_of`` and the tests read bodies back
with a JSON parser. The random head keeps two prompts from sharing a prefix by accident (a slice
start repeats; four head words out of 154 followed by the same one of 65,536 starts almost never
do), so prefix-cache hits come only from ``shared_prefix_share``. All numbers of one request come
from one ``getrandbits`` call.

Each body also gets a fresh request id (32 hex digits, sent as ``X-Request-Id``; on SGLang's ``/generate``
the body carries it as ``rid``): a random prefix drawn once per user and a counter, so an id costs a
formatted integer, not a uuid4's system call. Ids are not seeded: two runs send the same mix, never the
same ids.

Pure apart from the random prefix each user draws; no Locust.
"""

from __future__ import annotations

import os
import random
import struct
from array import array
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate, count
from typing import Any, NamedTuple

import orjson

from loadgen.core.scenario import Background
from loadgen.core.wire import Features, Kind, build_body

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
WORDS = _WORD_TEXT.split()  # the words of every generated prompt (the offload flush's fillers too)
assert all(w.isascii() and w.isalpha() and w.islower() for w in WORDS), "words must need no JSON escaping"
_WORD_BYTES = [w.encode() for w in WORDS]

_SHARED_PREFIX_SEED = 0x5EED
_CORPUS_SEED = 0xC0DE
CORPUS_MIN_WORDS = 1 << 16  # grown to twice the longest prompt when a scenario asks for more
HEAD_WORDS = 4
_PROMPT_MARK = "@@background-prompt@@"
_MAX_TOKENS_MARK = 987_654_321
_RID_MARK = "@@background-rid@@"
_EIGHT_U32 = struct.Struct("<8I")
_SP = b" "


@dataclass(frozen=True, slots=True)
class Corpus:
    """Seeded words joined by single spaces, and where each word starts (plus one past the end)."""

    text: bytes
    starts: array[int]

    @property
    def size(self) -> int:
        return len(self.starts) - 1

    def words(self, first: int, count: int) -> bytes:
        """``count`` consecutive words from word ``first`` on, space-separated."""
        return self.text[self.starts[first] : self.starts[first + count] - 1]


@lru_cache(maxsize=8)
def corpus(seed: int, size: int) -> Corpus:
    words = random.Random(seed ^ _CORPUS_SEED).choices(_WORD_BYTES, k=size)
    starts = array("L", accumulate((len(w) + 1 for w in words), initial=0))
    return Corpus(b" ".join(words) + b" ", starts)


class BackgroundBody(NamedTuple):
    payload: bytes  # the JSON request body
    max_tokens: int
    shared_prefix: bool
    request_id: bytes  # 32 lowercase hex digits, this request's alone


class _Template(NamedTuple):
    """A body serialised around its marks: before the request id (empty where the body carries none), between
    it and the prompt, between prompt and max_tokens, after."""

    rid: bytes
    before: bytes
    middle: bytes
    after: bytes


def _template(kind: Kind, model: str, stream: bool, usage: bool) -> _Template:
    prompt, messages = (None, [{"role": "user", "content": _PROMPT_MARK}]) if kind == "chat" else (_PROMPT_MARK, None)
    body = build_body(
        kind,
        model=model,
        prompt=prompt,
        messages=messages,
        max_tokens=_MAX_TOKENS_MARK,
        seed=None,
        stream=stream,
        features=Features(include_usage=usage),
    )
    raw = orjson.dumps({"rid": _RID_MARK, **body} if kind == "generate" else body)  # as client.send_canary sends
    prompt_mark, max_mark = orjson.dumps(_PROMPT_MARK), str(_MAX_TOKENS_MARK).encode()
    if raw.count(prompt_mark) != 1 or raw.count(max_mark) != 1 or raw.index(prompt_mark) > raw.index(max_mark):
        raise AssertionError(f"background body template: marks not found once each, in order: {raw!r}")
    rid, raw = raw.split(orjson.dumps(_RID_MARK)) if kind == "generate" else (b"", raw)
    before, rest = raw.split(prompt_mark)
    middle, after = rest.split(max_mark)
    return _Template(rid + b'"' if rid else b"", (b'"' if rid else b"") + before + b'"', b'"' + middle, after)


class BackgroundBodies:
    """An endless, seeded stream of background request bodies for one user."""

    def __init__(
        self, spec: Background, user_index: int, *, kind: Kind, model: str, stream: bool, usage: bool = False
    ) -> None:
        """``usage``: ask for token counts on streamed answers (``stream_options``; where the probe saw it honoured)."""
        self.spec = spec
        self._rng = random.Random(spec.seed * 1_000_003 + user_index)
        prefix_rng = random.Random(spec.seed ^ _SHARED_PREFIX_SEED)
        prefix = " ".join(prefix_rng.choice(WORDS) for _ in range(spec.shared_prefix_words))
        self._prefix = (prefix + " ").encode() if prefix else b""
        words = corpus(spec.seed, max(CORPUS_MIN_WORDS, 2 * spec.prompt_words[1]))
        self._view, self._starts, self._corpus_size = memoryview(words.text), words.starts, words.size
        self._rid, self._before, self._middle, self._after = _template(kind, model, stream, usage)
        self._id_prefix = os.urandom(8).hex().encode()  # drawn in the user's own process (never before a fork)
        self._sent = count()
        self._share = round(spec.shared_prefix_share * (1 << 32)) if self._prefix else 0
        self._words_lo, self._words_span = spec.prompt_words[0], spec.prompt_words[1] - spec.prompt_words[0] + 1
        self._max_lo, self._max_span = spec.max_tokens[0], spec.max_tokens[1] - spec.max_tokens[0] + 1

    def next(self) -> BackgroundBody:
        # 8 random 32-bit numbers; a value in [lo, lo + span) is lo + (u32 * span) >> 32
        a, b, c, d, e, f, g, h = _EIGHT_U32.unpack(self._rng.getrandbits(256).to_bytes(32, "little"))
        n = self._words_lo + ((a * self._words_span) >> 32)
        max_tokens = self._max_lo + ((b * self._max_span) >> 32)
        shared = c < self._share
        w, nw = _WORD_BYTES, len(_WORD_BYTES)
        words: tuple[bytes | memoryview, ...]
        if n > HEAD_WORDS:  # one join, one allocation: the corpus slice is a view, not a copy
            first = (h * (self._corpus_size - n + HEAD_WORDS + 1)) >> 32
            tail = self._view[self._starts[first] : self._starts[first + n - HEAD_WORDS] - 1]  # Corpus.words
            words = (
                w[(d * nw) >> 32],
                _SP,
                w[(e * nw) >> 32],
                _SP,
                w[(f * nw) >> 32],
                _SP,
                w[(g * nw) >> 32],
                _SP,
                tail,
            )
        else:
            words = (b" ".join([w[(x * nw) >> 32] for x in (d, e, f, g)[:n]]),)
        request_id = self._id_prefix + b"%016x" % next(self._sent)
        parts = (
            self._rid,
            request_id if self._rid else b"",
            self._before,
            self._prefix if shared else b"",
            *words,
            self._middle,
            b"%d" % max_tokens,
            self._after,
        )
        return BackgroundBody(b"".join(parts), max_tokens, shared, request_id)


def prompt_of(body: BackgroundBody | bytes) -> str:
    """The prompt a body carries (its user message for chat); for tests and benchmarks, not the hot path."""
    obj: dict[str, Any] = orjson.loads(body.payload if isinstance(body, BackgroundBody) else body)
    if "messages" in obj:
        return str(obj["messages"][-1]["content"])
    return str(obj["prompt"] if "prompt" in obj else obj["text"])  # "text": SGLang /generate
