"""Runs the scheduler in a worker thread and hands results to the asyncio loop.

Why this module exists: a step is numpy work of a few milliseconds; run on the event loop it
would stall HTTP. The runner owns one thread that drains an inbox (new requests, aborts), calls
``Scheduler.step`` while there is work, sleeps on an event when idle, and delivers each step's
tokens to the loop in one ``call_soon_threadsafe``. ``submit_all`` hands several requests over as one
inbox item, so the thread adds them to the scheduler in one drain and they are admitted in the same step
(budget permitting), never split by a step that ran between two submits. ``RequestStream`` is the asyncio side a
handler awaits; it also keeps the batch size of every step its request was in. After each step (or
idle inbox drain) the thread publishes ``gauges``, an immutable snapshot ``/metrics`` answers from:
a scrape never reads the scheduler's dicts while this thread changes them, and never waits for a
step. If the thread dies (an exception out of a step), ``failure`` says why, every request in flight ends
with :class:`EngineDead` and later ones are refused with it, and ``/health`` answers 503: an engine that
can no longer answer never looks healthy, and no client waits forever. Nothing here computes or formats.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from loadgen.engine.kvcache import PrefixCache, SlotKV
from loadgen.engine.kvwire import HandedKV
from loadgen.engine.metrics import EngineGauges
from loadgen.engine.model import TinyModel
from loadgen.engine.offload import OffloadDtype, OffloadTier
from loadgen.engine.plan import InvariantPaths
from loadgen.engine.sampling import PositionLogprobs
from loadgen.engine.scheduler import Delivery, EngineRequest, Scheduler, TokenEvent
from loadgen.engine.steplog import open_step_trace
from loadgen.engine.tokenizer import Tokenizer, load_tokenizer
from loadgen.engine.weights import ModelConfig, generate_weights


@dataclass(frozen=True)
class EngineOptions:
    """Everything that decides the engine's numerics and capacity (the CLI fills it)."""

    batch_invariant: bool = False
    enable_prefix_caching: bool = True
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_model_len: int = 512
    seed: int = 0
    logit_scale: float = 4.0
    prefix_cache_blocks: int = 1024
    paths: InvariantPaths | None = None
    recompute_last: bool = False  # a decode leg recomputes its last prompt token, as vLLM's decode server does
    step_trace: Path | None = None  # the folder this process writes its step trace into (``LOADGEN_STEP_TRACE``)
    kv_offloading_size: float | None = None  # GiB of the offload tier (loadgen/engine/offload.py); None: no tier
    kv_offloading_dtype: OffloadDtype = "bf16"  # the dtype the tier stores K/V at

    @property
    def invariant_paths(self) -> InvariantPaths:
        """``paths`` when given (tests fix one kernel at a time), else all-or-nothing from the flag."""
        return self.paths if self.paths is not None else InvariantPaths.all(self.batch_invariant)


def build_scheduler(opts: EngineOptions, tokenizer: Tokenizer | None = None) -> Scheduler:
    """A ready scheduler for ``opts``: weights from the seed, slots preallocated."""
    tok = tokenizer or load_tokenizer()
    cfg = ModelConfig(max_model_len=opts.max_model_len)
    weights = generate_weights(tok, opts.seed, cfg)
    kv = SlotKV(cfg, opts.max_num_seqs)
    model = TinyModel(weights, kv, opts.invariant_paths, opts.logit_scale)
    offload = None
    if opts.kv_offloading_size is not None:
        offload = OffloadTier(
            opts.kv_offloading_size, opts.kv_offloading_dtype, cfg.n_layers, cfg.n_heads, cfg.head_dim
        )
    return Scheduler(
        model=model,
        tokenizer=tok,
        prefix_cache=PrefixCache(opts.prefix_cache_blocks, opts.enable_prefix_caching),
        max_num_seqs=opts.max_num_seqs,
        max_num_batched_tokens=opts.max_num_batched_tokens,
        recompute_last=opts.recompute_last,
        trace=open_step_trace(opts.step_trace),
        offload=offload,
    )


class EngineDead(RuntimeError):
    """The engine thread died: the request cannot be answered (the message says why)."""


@dataclass
class RequestStream:
    """Asyncio side of one request: events arrive in batches; ``next_events`` waits for some."""

    request_id: str
    prompt_ids: list[int]
    cached_tokens: int = 0
    finished: bool = False
    batch_sizes: list[int] = field(default_factory=list)  # one per step the request had a row in
    handed: HandedKV | None = None  # a ``hand_over`` request's prompt KV, once its prefill step ran
    prompt_logprobs: tuple[PositionLogprobs, ...] | None = None  # the prompt's re-score, once its prefill step ran
    _pending: list[TokenEvent] = field(default_factory=list)
    _ready: asyncio.Event = field(default_factory=asyncio.Event)
    _dead: str | None = None  # why the engine thread died before this request finished

    def _deliver(self, delivery: Delivery) -> None:
        self.cached_tokens = delivery.cached_tokens
        self.batch_sizes.append(delivery.batch_size)
        if delivery.handed is not None:
            self.handed = delivery.handed
        if delivery.prompt_logprobs is not None:
            self.prompt_logprobs = delivery.prompt_logprobs
        self._pending.extend(delivery.events)
        self._ready.set()

    def _fail(self, why: str) -> None:
        self._dead = why
        self._ready.set()

    async def next_events(self) -> list[TokenEvent]:
        """All events not yet taken (at least one); empty only once the request has finished. Raises
        :class:`EngineDead` once the engine thread died and nothing more will come."""
        if self.finished:
            return []
        # waits only while there is nothing to say: a death that arrived behind pending tokens is raised on the
        # call after them (waiting then would wait forever, the event having been cleared by the call before)
        while not self._pending and self._dead is None:
            await self._ready.wait()
            self._ready.clear()
        if not self._pending:
            raise EngineDead(self._dead or "")
        events, self._pending = self._pending, []
        if events and events[-1].finish_reason is not None:
            self.finished = True
        return events


class EngineRunner:
    """The engine thread. ``submit_all``/``abort`` are called from the event loop."""

    def __init__(self, scheduler: Scheduler, loop: asyncio.AbstractEventLoop) -> None:
        self.scheduler = scheduler
        self._loop = loop
        self._inbox: queue.SimpleQueue[tuple[str, list[EngineRequest] | str]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._streams: dict[str, RequestStream] = {}
        self._resets: queue.SimpleQueue[tuple[concurrent.futures.Future[bool], bool]] = queue.SimpleQueue()
        self.gauges = EngineGauges.of(scheduler)  # replaced whole by the engine thread, read by /metrics
        self.failure: str | None = None  # why the engine thread died; None while it runs
        self._thread = threading.Thread(target=self._run, name="loadgen-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)
        if self.scheduler.trace is not None:
            self.scheduler.trace.close()

    def submit_all(self, reqs: list[EngineRequest]) -> list[RequestStream]:
        """Several requests that enter the scheduler together: one inbox item, added in one drain."""
        if self.failure is not None:
            raise EngineDead(self.failure)
        streams = [RequestStream(req.request_id, req.prompt_ids) for req in reqs]
        for stream in streams:
            self._streams[stream.request_id] = stream
        self._inbox.put(("add", list(reqs)))
        self._wake.set()
        return streams

    def abort(self, request_id: str) -> None:
        if self._streams.pop(request_id, None) is not None:
            self._inbox.put(("abort", request_id))
            self._wake.set()

    def reset_prefix_cache(self, reset_external: bool = False) -> concurrent.futures.Future[bool]:
        """Ask the engine thread to drop the prefix cache, and with ``reset_external`` the offload tier too. Like
        vLLM, it refuses while requests are running or waiting (their blocks are not freed): the future says
        whether the cache was dropped."""
        done: concurrent.futures.Future[bool] = concurrent.futures.Future()
        self._resets.put((done, reset_external))
        self._wake.set()
        return done

    def _drain_inbox(self) -> None:
        while True:
            try:
                kind, item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if kind == "add" and isinstance(item, list):
                for req in item:
                    self.scheduler.add(req)
            elif isinstance(item, str):
                self.scheduler.abort(item)

    def _run(self) -> None:
        try:
            self._loop_steps()
        except Exception as exc:  # noqa: BLE001 - a dead thread must say so, not leave /health at 200
            traceback.print_exc(file=sys.stderr)
            self.failure = f"the engine thread died: {type(exc).__name__}: {exc}"
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server is stopping anyway
                self._loop.call_soon_threadsafe(self._fail_all, self.failure)

    def _fail_all(self, why: str) -> None:
        for stream in self._streams.values():
            stream._fail(why)
        self._streams.clear()

    def _loop_steps(self) -> None:
        while not self._stop.is_set():
            self._drain_inbox()
            self._answer_resets()
            deliveries = self.scheduler.step() if self.scheduler.has_work else []
            # published before the tokens go out: a client that saw a token sees its step counted
            self.gauges = EngineGauges.of(self.scheduler, deliveries[0].batch_size if deliveries else None)
            if deliveries:
                self._loop.call_soon_threadsafe(self._dispatch, deliveries)
            elif not self.scheduler.has_work:
                self._wake.wait(timeout=0.5)
                self._wake.clear()

    def _answer_resets(self) -> None:
        while True:
            try:
                done, reset_external = self._resets.get_nowait()
            except queue.Empty:
                return
            if self.scheduler.has_work:
                print("Failed to reset prefix cache because some blocks are not freed yet", file=sys.stderr)
                done.set_result(False)
                continue
            self.scheduler.prefix_cache.reset()
            if reset_external and self.scheduler.offload is not None:
                self.scheduler.offload.reset()
            done.set_result(True)

    def _dispatch(self, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            stream = self._streams.get(delivery.request_id)
            if stream is None:
                continue
            stream._deliver(delivery)
            if delivery.events[-1].finish_reason is not None:
                del self._streams[delivery.request_id]
