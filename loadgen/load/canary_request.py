"""One canary request: its body from the scenario, and its record from what came back.

Why: the Locust canary user and the cold-boot study send the same canaries and must record them
the same way; this is the one place that turns a scenario canary into a request body and an
``Outcome`` into a ``CanaryRecord``. Pure apart from the fresh ids it draws; sends nothing.
"""

from __future__ import annotations

import uuid
from typing import Any

from collectors.record import CanaryRecord, Phase
from loadgen.load.client import Outcome
from loadgen.scenario import Canary, Scenario
from loadgen.wire import Features, Kind, build_body


def canary_body(scenario: Scenario, canary: Canary, *, model: str, features: Features) -> tuple[Kind, dict[str, Any]]:
    """The request body (every sampling parameter explicit; a fresh ``cache_salt`` for salted canaries)."""
    kind = scenario.canary_kind(canary)
    messages = None
    if kind == "chat":
        messages = (
            [m.model_dump() for m in canary.messages]
            if canary.messages
            else [{"role": "user", "content": canary.prompt or ""}]
        )
    extra = {"cache_salt": uuid.uuid4().hex} if canary.cache == "salt" else None
    body = build_body(
        kind,
        model=model,
        prompt=canary.prompt if kind == "completions" else None,
        messages=messages,
        max_tokens=canary.max_tokens,
        seed=canary.seed,
        stream=canary.stream,
        features=features,
        extra=extra,
    )
    return kind, body


def canary_record(
    out: Outcome,
    *,
    run_id: str,
    canary: Canary,
    kind: Kind,
    body: dict[str, Any],
    phase: Phase,
    level: int,
    inflight_at_send: int,
    worker: str,
    cache_reset_status: int | None,
    boot: int | None = None,
    boot_index: int | None = None,
    burst: bool = False,
    held_at_send: bool | None = None,
    background_held_at_send: int | None = None,
) -> CanaryRecord:
    c = out.completion
    return CanaryRecord(
        run_id=run_id,
        canary_id=canary.id,
        request_id=uuid.uuid4().hex,
        phase=phase,
        level=level,
        inflight_at_send=inflight_at_send,
        sent_at=out.sent_at,
        status="ok" if out.ok else "error",
        latency_s=out.latency_s,
        ttft_s=out.ttft_s,
        error_kind=out.error_kind,
        error_message=out.error_message,
        http_status=out.http_status,
        endpoint=kind,
        stream=canary.stream,
        request=body,
        worker=worker,
        token_ids=c.token_ids if c else None,
        tokens=c.tokens if c else None,
        logprobs=c.logprobs if c else None,
        top_logprobs=c.top_logprobs if c else None,
        text=c.text if c else None,
        finish_reason=c.finish_reason if c else None,
        usage=c.usage if c else None,
        cache_action=None if canary.cache == "keep" else canary.cache,
        cache_reset_status=cache_reset_status,
        boot=boot,
        boot_index=boot_index,
        burst=burst,
        held_at_send=held_at_send,
        background_held_at_send=background_held_at_send,
        engine_batch_sizes=c.batch_sizes if c else None,
    )
