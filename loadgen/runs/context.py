"""Does every request a scenario sends fit the endpoint's context? Asked once, before any traffic.

Why: an engine refuses a request whose prompt and completion together exceed its context (``max_model_len``) with
HTTP 400. A canary that asks for more fails every time, after a whole run's wait; background that asks for more
is refused while the level is reported as if its load were there. The endpoint states its limit in
``/v1/models`` (vLLM's and the embedded engine's ``max_model_len``, per model); a request is counted as its
prompt's words plus its ``max_tokens``, a lower bound on its tokens for any tokenizer that splits text at
spaces, so a request refused here would have been refused by the engine too.

Pure: the scenario and the ``/v1/models`` body in, an ``EndpointError`` naming the limit out. Sends nothing, and
says nothing of an endpoint that does not state a limit.
"""

from __future__ import annotations

from typing import Any

from loadgen.core.errors import EndpointError
from loadgen.core.scenario import Canary, Scenario

MORE_CONTEXT = (
    "start the engine with more context (the embedded engine: --engine-arg=--max-model-len=N, or the scenario's "
    '[launcher] args = ["--max-model-len=N"]; vLLM: --max-model-len)'
)


def context_of(models: Any, model: str) -> int | None:
    """The context the endpoint states for ``model`` in its ``/v1/models`` body, or None where it states none."""
    data = models.get("data") if isinstance(models, dict) else None
    for card in data if isinstance(data, list) else []:
        if isinstance(card, dict) and card.get("id") == model:
            limit = card.get("max_model_len")
            return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None
    return None


def _prompt_words(canary: Canary) -> int:
    if canary.messages:
        return sum(len(m.content.split()) for m in canary.messages)
    return len((canary.prompt or "").split())


def check_context(scenario: Scenario, limit: int | None, where: str) -> None:
    """Refuse ``scenario`` where a canary, or its largest background request, cannot fit ``limit`` tokens (None:
    no limit stated, nothing checked); ``where``: the endpoint's URL, which the message names."""
    if limit is None:
        return
    stated = f"{where}: the endpoint serves at most {limit} tokens per request (max_model_len in /v1/models)"
    for canary in scenario.canaries:
        words = _prompt_words(canary)
        if words + canary.max_tokens > limit:
            raise EndpointError(
                f"{stated}; canary {canary.id!r} asks for at least {words + canary.max_tokens} ({words} prompt "
                f"words + max_tokens {canary.max_tokens}), so every one would fail with HTTP 400: lower its "
                f"max_tokens or {MORE_CONTEXT}"
            )
    bg = scenario.background
    if not any(level > 0 for level in scenario.sweep.levels):
        return  # no background is sent
    words = bg.prompt_words[1] + (bg.shared_prefix_words if bg.shared_prefix_share > 0 else 0)
    need = words + bg.max_tokens[1]
    if need > limit:
        raise EndpointError(
            f"{stated}; the largest background request asks for at least {need} ({words} prompt words + max_tokens "
            f"{bg.max_tokens[1]}), and the endpoint would refuse such requests while their level is reported as "
            f"loaded: lower background.prompt_words or background.max_tokens, or {MORE_CONTEXT}"
        )
