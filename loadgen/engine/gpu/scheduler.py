"""Continuous batching on the GPU model, with the CPU scheduler's interface.

Why this module exists: ``EngineRunner``, the HTTP handlers and ``/metrics`` drive a scheduler
through ``add``, ``abort``, ``has_work``, ``step``, ``running``, ``waiting``, ``stats``,
``kv_usage``, ``prefix_cache`` and ``model.w.config``; this class offers the same so the GPU backend
reuses all of them (the queue bookkeeping is ``RequestQueue``'s, as on the CPU). Each ``step``
decodes one token for every running sequence, then admits waiting requests (slots and token budget
permitting) and prefills them, so the batch a request shares is whatever else is in flight, as on
the CPU engine. With ``invariant`` every sequence's decode and prefill run alone, in admission order
(batch size 1, keys exactly its own): its logits then depend on its own tokens only, at the price of
one forward per sequence per step. Sampling, stop strings and finish reasons use the CPU engine's
own functions on fp32 logits rows. There is no prefix cache (and no offload tier) on this backend: every prompt
is prefilled in full, ``cached_tokens`` is 0, and a cache reset has nothing to drop (the counters still
answer). A step's ``Delivery.batch_size`` (what ``x_batch_sizes`` reports) is every sequence the step
advanced, decoding and admitted together, as on the CPU engine: the concurrency the request ran at,
even where that step is split into several forwards (decode then prefill, or one per sequence when
``invariant``). With ``trace`` set, each step's rows (decodes, then whole-prompt prefills) are written to the
step trace before it runs, as on the CPU engine (loadgen/engine/steplog.py). It knows nothing of HTTP.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from loadgen.core.steptrace import StepWriter
from loadgen.engine.detok import TextState
from loadgen.engine.gpu.model import F32, GpuModel, to_host
from loadgen.engine.kvcache import PrefixCache
from loadgen.engine.offload import OffloadTier
from loadgen.engine.sampling import request_rng
from loadgen.engine.scheduler import Delivery, EngineRequest, RequestQueue, SchedulerStats, TokenEvent, advance
from loadgen.engine.steplog import step_record
from loadgen.engine.tokenizer import Tokenizer
from loadgen.engine.weights import ModelConfig


@dataclass(frozen=True)
class _Weights:
    config: ModelConfig


@dataclass(frozen=True)
class ModelCard:
    """What the HTTP layer reads of a model (``scheduler.model.w.config.max_model_len``)."""

    w: _Weights


@dataclass
class _Seq:
    req: EngineRequest
    slot: int
    tokens: list[int]
    text: TextState
    rng: np.random.Generator
    generated: int = 0


@dataclass
class GpuScheduler(RequestQueue[_Seq]):
    """Waiting queue, running set and the step over a :class:`GpuModel`; ``invariant`` fixes every shape."""

    gpu: GpuModel
    tokenizer: Tokenizer
    max_num_seqs: int
    max_num_batched_tokens: int
    invariant: bool
    waiting: deque[EngineRequest] = field(default_factory=deque)
    running: dict[str, _Seq] = field(default_factory=dict)
    stats: SchedulerStats = field(default_factory=SchedulerStats)
    prefix_cache: PrefixCache = field(default_factory=lambda: PrefixCache(0, False))
    offload: OffloadTier | None = None  # no offload tier on this backend either
    free: list[int] = field(default_factory=list)
    trace: StepWriter | None = None  # the step trace's writer (``LOADGEN_STEP_TRACE``), if any
    unseeded: np.random.Generator = field(default_factory=np.random.default_rng)  # what unseeded requests draw from

    def __post_init__(self) -> None:
        self.free = list(range(self.max_num_seqs - 1, -1, -1))
        self.model = ModelCard(_Weights(ModelConfig(max_model_len=self.gpu.cfg.max_model_len)))

    @property
    def max_model_len(self) -> int:
        return self.gpu.cfg.max_model_len

    def _release(self, seq: _Seq) -> None:
        self.free.append(seq.slot)

    def _admit(self, budget: int) -> list[_Seq]:
        admitted: list[_Seq] = []
        while self.waiting and self.free:
            req = self.waiting[0]
            if admitted and len(req.prompt_ids) > budget:
                break
            self.waiting.popleft()
            rng = request_rng(req.params.seed, self.unseeded)
            seq = _Seq(req, self.free.pop(), list(req.prompt_ids), TextState(req.params.stop), rng)
            self.running[req.request_id] = seq
            admitted.append(seq)
            budget -= len(req.prompt_ids)
            self.stats.prompt_tokens_total += len(req.prompt_ids)
        return admitted

    def _decode(self, seqs: list[_Seq]) -> F32:
        if self.invariant:
            # each sequence alone, in admission order: every kernel sees a shape set by that sequence only
            rows = [self._alone(s, [s.tokens[-1]], len(s.tokens) - 1) for s in seqs]
            return np.concatenate(rows, axis=0)
        kv_len = max(len(s.tokens) for s in seqs)
        starts = [len(s.tokens) - 1 for s in seqs]
        return to_host(self.gpu.forward([s.slot for s in seqs], [[s.tokens[-1]] for s in seqs], starts, kv_len))

    def _prefill(self, seqs: list[_Seq]) -> F32:
        if self.invariant:  # each prompt alone: its prefill never depends on the others
            return np.concatenate([self._alone(s, s.tokens, 0) for s in seqs], axis=0)
        kv_len = max(len(s.tokens) for s in seqs)
        return to_host(self.gpu.forward([s.slot for s in seqs], [s.tokens for s in seqs], [0] * len(seqs), kv_len))

    def _alone(self, seq: _Seq, tokens: list[int], start: int) -> F32:
        """One sequence's rows in a forward of its own, keys exactly up to its last token."""
        return to_host(self.gpu.forward([seq.slot], [tokens], [start], start + len(tokens)))

    def step(self) -> list[Delivery]:
        """One iteration: a token for every running sequence, then prefill of the admitted ones."""
        decoding = list(self.running.values())
        admitted = self._admit(self.max_num_batched_tokens - len(decoding))
        if not decoding and not admitted:
            return []
        if self.trace is not None:
            self.trace.write(step_record(self.stats.steps_total, decoding, [(s, 0) for s in admitted]))
        pairs: list[tuple[_Seq, F32]] = []
        if decoding:
            pairs += list(zip(decoding, self._decode(decoding), strict=True))
        if admitted:
            pairs += list(zip(admitted, self._prefill(admitted), strict=True))
        self.stats.steps_total += 1
        self.stats.batch_rows_last = len(decoding) + sum(len(s.tokens) for s in admitted)
        deliveries: list[Delivery] = []
        for seq, row in pairs:
            event = self._advance(seq, row)
            deliveries.append(Delivery(seq.req.request_id, 0, [event], len(pairs)))
            if event.finish_reason is not None:
                del self.running[seq.req.request_id]
                self._release(seq)
                self.stats.finished_total += 1
        return deliveries

    def _advance(self, seq: _Seq, logits: F32) -> TokenEvent:
        """Sample one token and apply the stop rules: the CPU scheduler's own function."""
        return advance(seq, logits, tokenizer=self.tokenizer, max_model_len=self.max_model_len, stats=self.stats)
