"""Continuous batching: one step advances every running sequence by a token and admits waiters.

Why this module exists: the batch a request shares must be whatever else is in flight, as in
vLLM. Each ``step`` admits waiting requests (prefill, with prefix-cache lookup) while slots
and the token budget allow, runs one forward pass over all decode rows and prefill rows
together, samples, applies stop rules, frees finished sequences and returns what each request
gained, with the step's batch size (the sequences in that forward pass: a request's
``x_batch_sizes`` is these, one per step it had a row in). For the prefill and decode roles
(loadgen/engine/kvwire.py) a request may ask for its prompt's KV after its prefill step
(``hand_over``: the delivery carries a copy), or arrive with a KV another server's prefill made
(``handed``): it is loaded into the slot, never recomputed, the prefill step's first token is taken
as sampled there, and the sequence decodes from the next step on; or, with ``recompute_last`` (vLLM's
decode server), every position but the last prompt token's is loaded, that token is prefilled here as
a one-row prefill and the first token is sampled here. A request with ``prompt_logprobs`` skips the prefix-cache
lookup (every prompt position is computed, as vLLM skips it for such a request; the offload tier's too) and its
prefill step's delivery
carries the re-score of its prompt. A seeded request samples from its own generator, an unseeded one from the
scheduler's shared ``unseeded`` generator (loadgen/engine/sampling.py).
With ``offload`` (loadgen/engine/offload.py) the lookup continues past the prefix-cache hit into the tier, and
every prefilled prompt's full blocks are stored there; each request's tokens by source (local hit, external) are
counted at its admission. With ``trace`` set, each forward step's rows are
written to the step trace before the step runs (loadgen/engine/steplog.py). It is synchronous and single-threaded
on purpose: :mod:`loadgen.engine.runner` drives it from a thread; tests call ``step`` directly. It
knows nothing of HTTP.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import ClassVar, Generic, Protocol, TypeVar

import numpy as np

from loadgen.core.steptrace import StepWriter
from loadgen.engine.detok import TextState
from loadgen.engine.kernels import F32
from loadgen.engine.kvcache import BLOCK_TOKENS, PrefixCache, SlotKV, block_hashes
from loadgen.engine.kvwire import HandedKV
from loadgen.engine.model import Segment, TinyModel
from loadgen.engine.offload import OffloadTier
from loadgen.engine.sampling import (
    PositionLogprobs,
    Sampled,
    SamplingParams,
    prompt_logprobs,
    request_rng,
    sample_row,
)
from loadgen.engine.steplog import step_record
from loadgen.engine.tokenizer import EOS_ID, Tokenizer


@dataclass(frozen=True)
class EngineRequest:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    cache_salt: str | None = None
    hand_over: bool = False  # a prefill leg: its delivery from the prefill step carries the prompt's KV
    handed: HandedKV | None = None  # a decode leg: the KV (and first token) another server's prefill made


@dataclass(frozen=True)
class TokenEvent:
    """One generated token, the text it made final, and the finish reason if it ended the request."""

    token_id: int
    logprob: float | None
    top: tuple[tuple[int, float], ...]
    text: str
    finish_reason: str | None = None
    stop_reason: str | int | None = None


@dataclass(frozen=True)
class Delivery:
    """What one request gained in one step; ``batch_size``: how many sequences that step ran."""

    request_id: str
    cached_tokens: int
    events: list[TokenEvent]
    batch_size: int
    handed: HandedKV | None = None  # a ``hand_over`` request's prompt KV, on its prefill step's delivery
    # a ``prompt_logprobs`` request's re-score of prompt positions 1.., on its prefill step's delivery
    prompt_logprobs: tuple[PositionLogprobs, ...] | None = None


@dataclass
class _Seq:
    req: EngineRequest
    slot: int
    tokens: list[int]
    text: TextState
    rng: np.random.Generator
    hashes: list[int]
    cached_tokens: int = 0
    generated: int = 0
    # of ``cached_tokens`` at admission: found in this engine's prefix cache, loaded from outside it (the offload
    # tier, a handed-over KV); the step trace's ``local``/``external`` of the request's first row, then None
    sources: tuple[int, int] | None = None


@dataclass
class SchedulerStats:
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    steps_total: int = 0
    batch_rows_last: int = 0
    finished_total: int = 0
    aborted_total: int = 0
    # prompt tokens by source (vLLM's prompt_tokens_by_source): a local prefix-cache hit, loaded from outside
    # (the offload tier or a handed-over KV); the rest of ``prompt_tokens_total`` was computed
    prompt_tokens_local_hit: int = 0
    prompt_tokens_external: int = 0


class SequenceLike(Protocol):
    """What the step's sampling and stop rules read and update on a running sequence (CPU or GPU)."""

    req: EngineRequest
    tokens: list[int]
    text: TextState
    rng: np.random.Generator
    generated: int


S = TypeVar("S", bound=SequenceLike)


class RequestQueue(Generic[S]):
    """What every backend's scheduler means by ``add``, ``abort``, ``has_work`` and ``kv_usage``.

    A subclass is a dataclass holding ``waiting``, ``running`` (by request id) and ``stats``; it says
    how long a sequence may grow (``max_model_len``) and how a sequence's slot is freed (``_release``)."""

    waiting: deque[EngineRequest]
    running: dict[str, S]
    stats: SchedulerStats
    max_num_seqs: int
    serves_prompt_logprobs: ClassVar[bool] = False  # whether ``prompt_logprobs`` is computed (the CPU engine's)

    @property
    def max_model_len(self) -> int:
        raise NotImplementedError

    def _release(self, seq: S) -> None:
        raise NotImplementedError

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def kv_usage(self) -> float:
        used = sum(len(s.tokens) for s in self.running.values())
        return used / float(self.max_num_seqs * self.max_model_len)

    def add(self, req: EngineRequest) -> None:
        self.waiting.append(req)

    def abort(self, request_id: str) -> bool:
        """Drop a waiting or running request and free its slot; False if unknown (already done)."""
        for req in self.waiting:
            if req.request_id == request_id:
                self.waiting.remove(req)
                self.stats.aborted_total += 1
                return True
        seq = self.running.pop(request_id, None)
        if seq is None:
            return False
        self._release(seq)
        self.stats.aborted_total += 1
        return True


@dataclass
class Scheduler(RequestQueue[_Seq]):
    """Waiting queue, running set, and the step; owns the model, KV slots and prefix cache."""

    model: TinyModel
    tokenizer: Tokenizer
    prefix_cache: PrefixCache
    max_num_seqs: int
    max_num_batched_tokens: int
    waiting: deque[EngineRequest] = field(default_factory=deque)
    running: dict[str, _Seq] = field(default_factory=dict)
    stats: SchedulerStats = field(default_factory=SchedulerStats)
    # a decode leg recomputes its last prompt token and samples its first token itself, as vLLM's does
    recompute_last: bool = False
    trace: StepWriter | None = None  # the step trace's writer (``LOADGEN_STEP_TRACE``), if any
    unseeded: np.random.Generator = field(default_factory=np.random.default_rng)  # what unseeded requests draw from
    offload: OffloadTier | None = None  # ``--kv-offloading-size``: the tier a lookup continues into
    serves_prompt_logprobs: ClassVar[bool] = True

    @property
    def kv(self) -> SlotKV:
        return self.model.kv

    @property
    def max_model_len(self) -> int:
        return self.model.w.config.max_model_len

    def _release(self, seq: _Seq) -> None:
        """Free the sequence's slot, moving the last slot's sequence into it (slots stay compact)."""
        last = self.kv.used - 1
        owner = next((s for s in self.running.values() if s.slot == last), None)
        moved = self.kv.release_moving_last(seq.slot, len(owner.tokens) if owner else 0)
        if moved is not None and owner is not None:
            owner.slot = seq.slot

    def _admit(self, budget: int) -> tuple[list[_Seq], list[Delivery]]:
        """Waiting requests into slots: those to prefill in this step, and the deliveries of handed-over ones."""
        admitted: list[_Seq] = []
        loaded: list[Delivery] = []
        while self.waiting and self.kv.free_slots and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            if admitted and req.handed is None and len(req.prompt_ids) > budget:
                break
            self.waiting.popleft()
            slot = self.kv.acquire()
            hashes = block_hashes(req.prompt_ids, req.cache_salt)
            rescore = req.params.prompt_logprobs is not None and req.handed is None
            n_local = 0 if rescore else self.prefix_cache.match(hashes, len(req.prompt_ids))
            self.prefix_cache.load(hashes, n_local, self.kv, slot)
            n_tier = (
                0
                if rescore or req.handed is not None
                else self._load_offloaded(hashes, n_local, len(req.prompt_ids), slot)
            )
            n_blocks = n_local + n_tier
            seq = _Seq(
                req=req,
                slot=slot,
                tokens=list(req.prompt_ids),
                text=TextState(req.params.stop),
                rng=request_rng(req.params.seed, self.unseeded),
                hashes=hashes,
                cached_tokens=n_blocks * BLOCK_TOKENS,
                sources=(n_local * BLOCK_TOKENS, n_tier * BLOCK_TOKENS),
            )
            self.running[req.request_id] = seq
            self.stats.prompt_tokens_total += len(req.prompt_ids)
            if req.handed is not None and self.recompute_last:
                self._load_all_but_last(seq, req.handed)  # then prefilled as a one-row prefill, below
            elif req.handed is not None:
                loaded.append(self._load_handed(seq, req.handed))
                continue
            self._count_sources(seq)
            admitted.append(seq)
            budget -= len(req.prompt_ids) - seq.cached_tokens
        return admitted, loaded

    def _load_offloaded(self, hashes: list[int], n_local: int, prompt_len: int, slot: int) -> int:
        """Continue the GPU prefix match block by block in the offload tier (never covering the last prompt
        token); the blocks found go into the slot and into the prefix cache, as vLLM caches loaded blocks."""
        if self.offload is None:
            return 0
        usable = min(len(hashes), (prompt_len - 1) // BLOCK_TOKENS)
        n = self.offload.match(hashes, n_local, usable)
        self.offload.load(hashes, n_local, n, self.kv, slot)
        if n:
            self.prefix_cache.store(hashes[: n_local + n], self.kv, slot)
        return n

    def _count_sources(self, seq: _Seq) -> None:
        """The request's prompt tokens by source, once, at its admission: of its ``cached_tokens``, the local
        hit and the rest (loaded from outside this engine's prefix cache)."""
        local = seq.sources[0] if seq.sources is not None else 0
        seq.sources = (local, seq.cached_tokens - local)
        self.stats.prompt_tokens_local_hit += local
        self.stats.prompt_tokens_external += seq.cached_tokens - local

    def _load_handed(self, seq: _Seq, handed: HandedKV) -> Delivery:
        """The handed-over KV into the slot past the local prefix-cache hit (as vLLM's connector loads only what
        the local cache lacks), its full blocks into the prefix cache (as vLLM keeps received blocks), and the
        prefill step's first token taken as sampled there. The sequence decodes from the next step."""
        self.kv.load(seq.slot, seq.cached_tokens, handed.k, handed.v)
        self.prefix_cache.store(seq.hashes, self.kv, seq.slot)
        seq.cached_tokens = len(seq.req.prompt_ids)
        self._count_sources(seq)
        first = Sampled(handed.first_token, handed.first_logprob, handed.first_top)
        event = append_token(seq, first, tokenizer=self.tokenizer, max_model_len=self.max_model_len, stats=self.stats)
        if event.finish_reason is not None:
            del self.running[seq.req.request_id]
            self._release(seq)
            self.stats.finished_total += 1
        return Delivery(seq.req.request_id, seq.cached_tokens, [event], handed.batch_size)

    def _load_all_but_last(self, seq: _Seq, handed: HandedKV) -> None:
        """vLLM's decode server: the handed-over KV of every prompt position but the last one, past the local
        prefix-cache hit (which never covers the last token); the step then computes the last one itself."""
        last = len(seq.req.prompt_ids) - 1
        self.kv.load(seq.slot, seq.cached_tokens, handed.k[:, :, :last], handed.v[:, :, :last])
        seq.cached_tokens = last

    def _hand_over(self, seq: _Seq, event: TokenEvent, batch_size: int) -> HandedKV:
        """A copy of the prompt's KV as this step's prefill left it, with the token it sampled."""
        k, v = self.kv.export(seq.slot, len(seq.req.prompt_ids))
        return HandedKV(tuple(seq.req.prompt_ids), k, v, event.token_id, event.logprob, event.top, batch_size)

    def step(self) -> list[Delivery]:
        """One scheduler iteration; returns the new tokens of every request that got one."""
        decoding = list(self.running.values())
        admitted, loaded = self._admit(self.max_num_batched_tokens - len(decoding))
        if not decoding and not admitted:
            return loaded
        segments = [Segment(s.slot, [s.tokens[-1]], len(s.tokens) - 1, True) for s in decoding]
        segments += [
            Segment(s.slot, s.tokens[s.cached_tokens :], s.cached_tokens, True, _rescores(s)) for s in admitted
        ]
        order = decoding + admitted
        if self.trace is not None:
            prefills = [(s, s.cached_tokens) for s in admitted]
            sources = {s.req.request_id: s.sources for s in order if s.sources is not None}
            self.trace.write(step_record(self.stats.steps_total, decoding, prefills, sources))
        for seq in order:
            seq.sources = None  # told on the request's first row only
        logits, every = self.model.forward_rows(segments)
        self.stats.steps_total += 1
        self.stats.batch_rows_last = sum(len(seg.token_ids) for seg in segments)
        for seq in admitted:
            self.prefix_cache.store(seq.hashes, self.kv, seq.slot)
            if self.offload is not None:
                self.offload.store(seq.hashes, self.kv, seq.slot)
        deliveries = loaded
        for row, seq in enumerate(order):
            event = self._advance(seq, logits[row])
            prefilled = row >= len(decoding)
            handed = self._hand_over(seq, event, len(order)) if prefilled and seq.req.hand_over else None
            rows = every[row]
            rescored = None
            if rows is not None and seq.req.params.prompt_logprobs is not None:
                rescored = prompt_logprobs(rows, seq.req.prompt_ids[1:], seq.req.params.prompt_logprobs)
            delivery = Delivery(seq.req.request_id, seq.cached_tokens, [event], len(order), handed, rescored)
            deliveries.append(delivery)
            if event.finish_reason is not None:
                del self.running[seq.req.request_id]
                self._release(seq)
                self.stats.finished_total += 1
        return deliveries

    def _advance(self, seq: _Seq, logits: F32) -> TokenEvent:
        return advance(seq, logits, tokenizer=self.tokenizer, max_model_len=self.max_model_len, stats=self.stats)


def _rescores(seq: _Seq) -> bool:
    """Whether this prefill computes every prompt position's logits: asked, and nothing of the prompt cached."""
    return seq.req.params.prompt_logprobs is not None and seq.cached_tokens == 0


def advance(
    seq: SequenceLike, logits: F32, *, tokenizer: Tokenizer, max_model_len: int, stats: SchedulerStats
) -> TokenEvent:
    """Sample one token for ``seq`` and apply the stop rules; one definition for every backend."""
    sampled = sample_row(logits, seq.req.params, seq.rng)
    return append_token(seq, sampled, tokenizer=tokenizer, max_model_len=max_model_len, stats=stats)


def append_token(
    seq: SequenceLike, sampled: Sampled, *, tokenizer: Tokenizer, max_model_len: int, stats: SchedulerStats
) -> TokenEvent:
    """Append a sampled token to ``seq`` and apply the stop rules (also for a token sampled on another server)."""
    params = seq.req.params
    token = sampled.token_id
    seq.tokens.append(token)
    seq.generated += 1
    stats.generation_tokens_total += 1
    finish: str | None = None
    stop_reason: str | int | None = None
    is_eos = token == EOS_ID and not params.ignore_eos
    if is_eos or token in params.stop_token_ids:
        finish = "stop"
        stop_reason = None if is_eos else token
        text = seq.text.finish()
    else:
        text = seq.text.push(tokenizer.token_bytes[token])
        if seq.text.stopped_by is not None:
            finish, stop_reason = "stop", seq.text.stopped_by
        elif seq.generated >= params.max_tokens or len(seq.tokens) >= max_model_len:
            finish = "length"
        if finish is not None:
            text += seq.text.finish()
    return TokenEvent(token, sampled.logprob, sampled.top, text, finish, stop_reason)
