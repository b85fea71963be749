"""The part of vLLM the step-trace plugin touches, of vLLM's own shapes, installed as ``vllm.v1.core.sched.*``.

The dataclasses carry the field names and meanings of ``vllm/v1/core/sched/output.py`` (the fields the plugin
does not read are left out), and ``Scheduler.schedule`` keeps the order vLLM's does: the output lists each
request's computed tokens before the step (a new request's prefix-cache hit included), and only then is the
request's own count advanced (vLLM's ``_update_after_schedule``). A preempted request loses its computed
tokens and comes back as a cached request in ``resumed_req_ids``. As vLLM 0.26's (``vllm/v1/request.py``,
``vllm/v1/metrics/stats.py``), a request carries ``prefill_stats``, set at its first scheduling unless it was
preempted before (``num_preemptions``); ``OldScheduler``'s requests have no such attribute (a vLLM before it).
What to schedule is the test's plan, one ``Step`` per call, so a test states a step and reads back the line the
real plugin wrote for it.
"""

from __future__ import annotations

import sys
import types
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: list[int] | None
    block_ids: tuple[list[int], ...]
    num_computed_tokens: int


@dataclass
class CachedRequestData:
    req_ids: list[str]
    resumed_req_ids: set[str]
    new_token_ids: list[list[int]]
    num_computed_tokens: list[int]
    num_output_tokens: list[int]


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: list[NewRequestData]
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int
    finished_req_ids: set[str]
    preempted_req_ids: set[str] | None = None


@dataclass
class PrefillStats:
    num_prompt_tokens: int = 0
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0
    num_local_cached_tokens: int = 0
    num_external_cached_tokens: int = 0

    def set(self, num_prompt_tokens: int, num_local_cached_tokens: int, num_external_cached_tokens: int) -> None:
        self.num_prompt_tokens = num_prompt_tokens
        self.num_cached_tokens = num_local_cached_tokens + num_external_cached_tokens
        self.num_computed_tokens = num_prompt_tokens - self.num_cached_tokens
        self.num_local_cached_tokens = num_local_cached_tokens
        self.num_external_cached_tokens = num_external_cached_tokens


@dataclass
class OldRequest:
    request_id: str
    prompt_token_ids: list[int]
    num_computed_tokens: int = 0
    num_preemptions: int = 0

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)


@dataclass
class Request(OldRequest):
    prefill_stats: PrefillStats | None = field(default_factory=PrefillStats)


@dataclass
class Step:
    """One planned step: tokens per request id, the ids preempted while scheduling it."""

    tokens: dict[str, int]
    preempted: set[str] = field(default_factory=set)


class Scheduler:
    def __init__(self) -> None:
        self.requests: dict[str, OldRequest] = {}
        self.plan: deque[Step] = deque()
        self._hits: dict[str, int] = {}  # prefix-cache hit of a request not yet scheduled
        self._external: dict[str, int] = {}  # its connector's (an offload tier, a P/D transfer) tokens
        self._preempted: set[str] = set()

    request_cls: type[OldRequest] = Request

    def add_request(self, req_id: str, prompt: int, cached: int = 0, external: int = 0) -> None:
        """``cached``: tokens found in the local prefix cache; ``external``: loaded by a KV connector past them."""
        self.requests[req_id] = self.request_cls(req_id, list(range(prompt)))
        self._hits[req_id] = cached
        self._external[req_id] = external

    def schedule(self) -> SchedulerOutput:
        step = self.plan.popleft() if self.plan else Step({})
        for rid in step.preempted:
            self.requests[rid].num_computed_tokens = 0
            self.requests[rid].num_preemptions += 1
            self._preempted.add(rid)
        new: list[NewRequestData] = []
        cached = CachedRequestData([], set(), [], [], [])
        for rid in step.tokens:
            req = self.requests[rid]
            if rid in self._hits:
                local, external = self._hits.pop(rid), self._external.pop(rid)
                req.num_computed_tokens = local + external
                stats = getattr(req, "prefill_stats", None)
                if stats is not None and req.num_preemptions <= 0:  # vLLM: the first scheduled prefill only
                    stats.set(req.num_prompt_tokens, local, external)
                new.append(NewRequestData(rid, req.prompt_token_ids, ([],), req.num_computed_tokens))
                continue
            if rid in self._preempted:
                self._preempted.discard(rid)
                cached.resumed_req_ids.add(rid)
            cached.req_ids.append(rid)
            cached.num_computed_tokens.append(req.num_computed_tokens)
            cached.num_output_tokens.append(max(0, req.num_computed_tokens - req.num_prompt_tokens))
        output = SchedulerOutput(
            scheduled_new_reqs=new,
            scheduled_cached_reqs=cached,
            num_scheduled_tokens=dict(step.tokens),
            total_num_scheduled_tokens=sum(step.tokens.values()),
            finished_req_ids=set(),
            preempted_req_ids=set(step.preempted),
        )
        for rid, n in step.tokens.items():
            self.requests[rid].num_computed_tokens += n
        return output


class AsyncScheduler(Scheduler):
    """vLLM's asynchronous scheduler inherits ``schedule``."""


class OldScheduler(Scheduler):
    """A vLLM from before ``prefill_stats``."""

    request_cls = OldRequest


@contextmanager
def installed() -> Iterator[types.ModuleType]:
    """A fresh ``vllm.v1.core.sched.scheduler`` (its own ``Scheduler`` class) in ``sys.modules``, removed after."""
    scheduler_module = types.ModuleType("vllm.v1.core.sched.scheduler")
    # a class of its own each time: the plugin patches the class, and each test starts from an unpatched one
    scheduler_module.Scheduler = type("Scheduler", (Scheduler,), {})  # type: ignore[attr-defined]
    scheduler_module.AsyncScheduler = type("AsyncScheduler", (scheduler_module.Scheduler,), {})  # type: ignore[attr-defined]
    scheduler_module.OldScheduler = type("OldScheduler", (scheduler_module.Scheduler,), {"request_cls": OldRequest})  # type: ignore[attr-defined]
    output_module = types.ModuleType("vllm.v1.core.sched.output")
    output_module.SchedulerOutput = SchedulerOutput  # type: ignore[attr-defined]
    modules: Mapping[str, types.ModuleType] = {
        "vllm": types.ModuleType("vllm"),
        "vllm.v1": types.ModuleType("vllm.v1"),
        "vllm.v1.core": types.ModuleType("vllm.v1.core"),
        "vllm.v1.core.sched": types.ModuleType("vllm.v1.core.sched"),
        "vllm.v1.core.sched.scheduler": scheduler_module,
        "vllm.v1.core.sched.output": output_module,
    }
    for name, module in modules.items():
        parent, _, last = name.rpartition(".")
        if parent:
            setattr(modules[parent], last, module)
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        yield scheduler_module
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
