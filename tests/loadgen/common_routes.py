"""The routes the test servers answer alike (fault_server.py, concurrency_server.py, onset_server.py):
``GET /v1/models`` with the one model ``m`` the tests' scenarios name, a vLLM-style ``GET /metrics``
whose running gauge is the server's own count of requests in flight, and the close of a streamed answer.

Why one module: the probe asks every endpoint for its model list and the scraper reads every engine's
gauges, so each server needs both; one copy keeps them saying the same. Imported by the servers from
their own folder (they run as scripts, and the tests' conftest puts this folder on the path); it
starts nothing and holds no state of its own: the gauge reads the state the server passes in.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.Response]]


async def models(_: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})


def running_gauge(state: dict[str, Any]) -> Handler:
    """``GET /metrics``: ``vllm:num_requests_running`` from ``state["inflight"]`` at each scrape, waiting 0."""

    async def metrics(_: web.Request) -> web.Response:
        text = (
            "# HELP vllm:num_requests_running Requests being served.\n# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{model_name="m"}} {state["inflight"]}\n'
            "# HELP vllm:num_requests_waiting Requests waiting.\n# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{model_name="m"} 0\n'
        )
        return web.Response(text=text, content_type="text/plain")

    return metrics


async def end_stream(
    resp: web.StreamResponse, body: dict[str, Any], obj: str, usage: dict[str, int]
) -> web.StreamResponse:
    """A streamed answer's close: the usage chunk when ``body`` asked for it (``stream_options.include_usage``,
    no choices, as vLLM sends it), then ``[DONE]``. ``obj``: the answer's object, ``text_completion`` or
    ``chat.completion``."""
    if (body.get("stream_options") or {}).get("include_usage"):
        final = {"id": "x", "object": obj + ".chunk", "model": "m", "choices": [], "usage": usage}
        await resp.write(b"data: " + json.dumps(final).encode() + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


def legacy_text(tid: int) -> str:
    """Token ``tid``'s string in the test servers' answers."""
    return f" t{tid}"


def legacy_choice(ids: list[int], body: dict[str, Any], finish: str | None) -> dict[str, Any]:
    """One completions choice of ``ids`` in the legacy dialect (vLLM's ``logprobs`` shape, ids in ``token_ids``),
    with only what ``body`` asked for."""
    choice: dict[str, Any] = {"index": 0, "text": "".join(legacy_text(t) for t in ids), "finish_reason": finish}
    if body.get("logprobs"):
        choice["logprobs"] = {
            "tokens": [legacy_text(t) for t in ids],
            "token_logprobs": [-0.25 for _ in ids],
            "top_logprobs": [{legacy_text(t): -0.25, legacy_text(t + 1): -1.5} for t in ids],
            "text_offset": [0 for _ in ids],
        }
    if body.get("return_token_ids"):
        choice["token_ids"] = ids
    return choice
