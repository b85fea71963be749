"""The engine's prefix-cache reset route: POST it and say whether the cache was dropped.

Why apart: the canary path (``loadgen.load.canary_request``: a reset before a canary or a burst) and a matrix
cell's direct decode check (``loadgen.studies.decoder_direct``) ask it the same way, and how engines answer a reset
they refuse is its own knowledge (docs/design.md, "Cache actions"), not the request client's. Sends through the
client's connection and deadline (``loadgen.load.client``); never retries (``reset_before_burst`` does, by its rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from loadgen.load.client import EndpointClient
from loadgen.load.deadlines import DeadlineHit
from loadgen.load.transport import HTTPParseError, ResponseTooLarge, cap_body


@dataclass(frozen=True)
class ResetAnswer:
    """How the engine answered a prefix-cache reset. ``status`` None: no answer (unreachable, too slow, too big)."""

    status: int | None
    dropped: bool  # the engine says the cache was dropped


def reset_dropped(status: int | None, body: bytes) -> bool:
    """A 2xx answer, unless its body says otherwise: vLLM 0.26 answers a reset it refuses (requests still
    running) with 200 and ``{"success": false}``; newer vLLM answer 409."""
    if status is None or not 200 <= status < 300:
        return False
    try:
        answer = orjson.loads(body) if body.strip() else None
    except orjson.JSONDecodeError:
        return True
    return not (isinstance(answer, dict) and answer.get("success") is False)


def reset_cache(client: EndpointClient, path: str) -> ResetAnswer:
    """POST the engine's prefix-cache reset route and say whether the cache was dropped."""
    try:
        client.deadlines.arm(client.limits.deadline_s(0))
        resp = client.request("POST", path, body=b"")
        cap_body(resp, client.limits.max_response_bytes)
        body = resp.read()
        status = int(resp.status_code)
        return ResetAnswer(status, reset_dropped(status, body))
    except (DeadlineHit, OSError, HTTPParseError, ResponseTooLarge):
        return ResetAnswer(None, False)
    finally:
        client.deadlines.disarm()
