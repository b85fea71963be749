"""One canary request: its body from the scenario, and its record from what came back.

Why: the Locust canary user and the cold-boot study send the same canaries and must record them
the same way; this is the one place that turns a scenario canary into a request body and an
``Outcome`` into a ``CanaryRecord``, and the one place that decides what happens to the prefix cache
before a canary or a burst. Pure apart from the fresh ids it draws, the cache resets ``prepare_cache``
and ``reset_before_burst`` POST and the flush ``prepare_cache`` is handed (``loadgen.load.flush``).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from loadgen.core.band import LevelBound
from loadgen.core.record import CanaryRecord, Phase
from loadgen.core.scenario import Canary, Scenario
from loadgen.core.wire import Features, Kind, Sampling, build_body
from loadgen.load.cache_reset import ResetAnswer, reset_cache
from loadgen.load.client import EndpointClient, Outcome, send_burst, send_canary

CacheAction = Literal["reset", "salt", "gpu_reset", "flush"] | None  # None: the cache was kept
Flush = Callable[[], int]  # the offload action's flush (``loadgen.load.flush.Flusher``): the filler tokens sent
RESET_EXTERNAL = "reset_external=true"  # vLLM 0.26 and the embedded engine: the offload tier is emptied too


@dataclass(frozen=True)
class CacheStep:
    """What was done to the prefix cache before a canary: the action, the reset's answer and the flush's filler
    tokens, where there was one."""

    action: CacheAction
    reset: ResetAnswer | None = None
    flush_tokens: int | None = None


def with_external(path: str) -> str:
    """``path`` (the reset route) asking the engine to empty its offload tier too (SGLang's ``/flush_cache`` reads
    no query: the same flush)."""
    return f"{path}{'&' if '?' in path else '?'}{RESET_EXTERNAL}"


def planned_cache_action(canary: Canary, *, busy: bool) -> CacheAction:
    """What to do to the prefix cache before sending ``canary`` (docs/design.md, "Cache actions").

    ``busy``: other requests may be running on the engine (background at this level, a burst, another
    canary in flight). vLLM refuses to reset its prefix cache while requests run and still answers, so a
    reset under load is no miss: "miss" salts instead, "offload" flushes. A failed reset falls back the same
    way (``cache_after_reset``, ``prepare_cache``).
    """
    if canary.cache == "keep":
        return None
    if canary.cache == "miss":
        return "salt" if busy else "reset"
    if canary.cache == "offload":
        return "flush" if busy else "gpu_reset"
    return canary.cache


def cache_after_reset(canary: Canary, dropped: bool) -> CacheAction:
    """The action a canary ends up with once its reset answered: a "miss" canary whose reset was refused
    is salted instead; a forced "reset" stays a reset (the report checks its effect)."""
    return "salt" if canary.cache == "miss" and not dropped else "reset"


def prepare_cache(
    client: EndpointClient, canary: Canary, path: str, *, busy: bool, flush: Flush | None = None
) -> CacheStep:
    """Act on the prefix cache before ``canary`` is sent. "reset" and "miss" reset with ``RESET_EXTERNAL``, so a
    miss is a miss in the offload tier too; "offload" resets the GPU cache alone, or where that cannot be done
    (``busy``, or the reset refused) sends ``flush`` (given wherever a run has offload canaries:
    ``loadgen.runs.cache_size`` refused the run otherwise)."""
    action = planned_cache_action(canary, busy=busy)
    if action in ("gpu_reset", "flush"):
        answer = reset_cache(client, path) if action == "gpu_reset" else None
        if answer is not None and answer.dropped:
            return CacheStep("gpu_reset", answer)
        assert flush is not None, "an offload canary needs the run's flush (loadgen.load.flush.Flusher)"
        return CacheStep("flush", answer, flush())
    if action != "reset":
        return CacheStep(action)
    answer = reset_cache(client, with_external(path))
    return CacheStep(cache_after_reset(canary, answer.dropped), answer)


# answers that say "busy, ask again" (vLLM 0.26: 200 with success false; newer vLLM 409; SGLang 400); any
# other refusal (no such route: llama.cpp, a proxy) will not change by waiting
_BUSY_STATUSES = frozenset({200, 400, 409})
_RESET_RETRY_S = 0.05


def reset_before_burst(
    client: EndpointClient, path: str, *, timeout_s: float, stopping: Callable[[], bool]
) -> ResetAnswer:
    """Reset the prefix cache (and the offload tier) before a burst (``sweep.burst_cache = "reset"``): asked
    again every 50 ms while the engine refuses because requests still run (the level before's background
    ending), until it drops the cache, ``timeout_s`` passes, or the answer is one that waiting will not
    change. The last answer is what every copy records; a refused one stays visible in the report as a refused reset."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = reset_cache(client, with_external(path))
        busy = answer.status in _BUSY_STATUSES
        if answer.dropped or not busy or time.monotonic() > deadline or stopping():
            return answer
        time.sleep(_RESET_RETRY_S)


def new_request_id() -> str:
    """A fresh request id: a canary record's ``request_id``, sent with its request (``X-Request-Id``)."""
    return uuid.uuid4().hex


def canary_body(
    scenario: Scenario, canary: Canary, *, model: str, features: Features, salt: bool
) -> tuple[Kind, dict[str, Any]]:
    """The request body (every sampling parameter explicit; a fresh ``cache_salt`` where ``salt``)."""
    kind = scenario.canary_kind(canary)
    messages = None
    if kind == "chat":
        messages = (
            [m.model_dump() for m in canary.messages]
            if canary.messages
            else [{"role": "user", "content": canary.prompt or ""}]
        )
    extra = {"cache_salt": uuid.uuid4().hex} if salt else None
    body = build_body(
        kind,
        model=model,
        prompt=None if kind == "chat" else canary.prompt,
        messages=messages,
        max_tokens=canary.max_tokens,
        seed=canary.seed,
        stream=canary.stream,
        features=features,
        extra=extra,
        sampling=Sampling(canary.temperature, canary.top_p, canary.top_k, canary.min_p, canary.n),
    )
    return kind, body


def choice_id(canary_id: str, choice: int) -> str:
    """The id choice ``choice`` of an ``n > 1`` canary is recorded under: each choice its own series, compared with
    its own seeded baseline (vLLM seeds choice j with seed + j)."""
    return f"{canary_id}.choice{choice}"


def send_choices(
    client: EndpointClient,
    path: str,
    kind: Kind,
    body: dict[str, Any],
    request_id: str,
    *,
    tokens_as_ids: bool = False,
    secret: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[Outcome, list[Outcome]]:
    """``send_canary``, and the outcome of each choice: the one outcome where the body asks one choice; for
    ``n > 1`` (unstreamed: the scenario checked) the answer split by choice index, each choice with the request's
    timing and status (``send_burst``'s split; ``progress`` unused: nothing streams)."""
    n = body.get("n", 1)
    if type(n) is not int or n <= 1:
        out = send_canary(
            client, path, kind, body, request_id, tokens_as_ids=tokens_as_ids, secret=secret, progress=progress
        )
        return out, [out]
    choices = send_burst(
        client,
        path,
        kind,
        body,
        [request_id] * n,
        max_tokens=int(body["max_tokens"]),  # completions and chat: n > 1 is refused on /generate
        tokens_as_ids=tokens_as_ids,
        secret=secret,
    )
    return choices[0], choices


def choice_records(record: CanaryRecord, choices: list[Outcome]) -> list[CanaryRecord]:
    """``record`` as one record per choice: itself for one choice; for ``n > 1`` a copy per choice under
    ``choice_id``, with that choice's completion and status (the request's body, id and timing shared)."""
    if len(choices) == 1:
        return [record]
    return [
        dataclasses.replace(record, canary_id=choice_id(record.canary_id, j), choice=j, **_answer(one))
        for j, one in enumerate(choices)
    ]


def _answer(out: Outcome) -> dict[str, Any]:
    """What a record keeps of one answer (a request's, or one choice's of it): its status and its completion."""
    c = out.completion
    return {
        "status": "ok" if out.ok else "error",
        "error_kind": out.error_kind,
        "error_message": out.error_message,
        "token_ids": c.token_ids if c else None,
        "tokens": c.tokens if c else None,
        "logprobs": c.logprobs if c else None,
        "top_logprobs": c.top_logprobs if c else None,
        "text": c.text if c else None,
        "finish_reason": c.finish_reason if c else None,
        "usage": c.usage if c else None,
        "engine_batch_sizes": c.batch_sizes if c else None,
        "answer_id": c.answer_id if c else None,
    }


def canary_record(
    out: Outcome,
    *,
    request_id: str,
    run_id: str,
    canary: Canary,
    kind: Kind,
    body: dict[str, Any],
    phase: Phase,
    level: int,
    inflight_at_send: int,
    worker: str,
    cache_action: CacheAction,
    cache_reset: ResetAnswer | None,
    flush_tokens: int | None = None,
    boot: int | None = None,
    boot_index: int | None = None,
    burst: bool = False,
    held_at_send: bool | None = None,
    background_held_at_send: int | None = None,
    background_buffered: bool | None = None,
    level_bound: LevelBound | None = None,
    background_phase: str | None = None,
) -> CanaryRecord:
    return CanaryRecord(
        run_id=run_id,
        canary_id=canary.id,
        request_id=request_id,
        phase=phase,
        level=level,
        inflight_at_send=inflight_at_send,
        sent_at=out.sent_at,
        latency_s=out.latency_s,
        ttft_s=out.ttft_s,
        http_status=out.http_status,
        endpoint=kind,
        stream=canary.stream,
        request=body,
        worker=worker,
        cache_action=cache_action,
        cache_reset_status=None if cache_reset is None else cache_reset.status,
        cache_reset_ok=None if cache_reset is None else cache_reset.dropped,
        flush_tokens=flush_tokens,
        boot=boot,
        boot_index=boot_index,
        burst=burst,
        held_at_send=held_at_send,
        background_held_at_send=background_held_at_send,
        background_buffered=background_buffered,
        level_bound=level_bound,
        background_phase=background_phase,
        **_answer(out),
    )
