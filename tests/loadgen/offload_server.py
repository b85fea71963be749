"""An OpenAI-style server that speaks the offload contract: its cache's size in ``vllm:cache_config_info``, a reset
route that tells a GPU-only reset from one that empties the offload tier too, and prompts counted in tokens.

Run as ``python -m tests.loadgen.offload_server [--blocks N] [--no-blocks] [--refuse-reset] [--token-s S]``; prints
``READY http://127.0.0.1:PORT``. It is what a canary's ``cache = "offload"`` must be driven against (docs/design.md,
"Cache actions"): every reset and every request it saw is kept, for the tests to hold the action to the contract.

- ``GET /v1/models``: model ``m`` with ``max_model_len`` 512.
- ``GET /metrics``: ``vllm:num_requests_running`` (its own count in flight) and ``vllm:cache_config_info`` with
  ``block_size`` 16 and ``num_gpu_blocks`` ``--blocks`` (default 32: 512 tokens), as vLLM 0.26 labels it; with
  ``--no-blocks`` the label is absent, as an engine that does not state its cache's size.
- ``POST /reset_prefix_cache``: kept as ``{"external": bool, "running": n}`` (``?reset_external=true`` read as
  vLLM 0.26 reads it); answers ``{"success": false}`` (HTTP 200, vLLM 0.26's refusal) while requests run, or
  always with ``--refuse-reset``.
- ``POST /v1/completions`` (unstreamed): a prompt's tokens are its words; one longer than the context (with its
  ``max_tokens``) is refused with HTTP 400, as vLLM refuses it. Answers ``max_tokens`` ids ``1000 + i``, one per
  ``--token-s`` seconds, with ``usage.prompt_tokens``; kept as ``{"tokens", "max_tokens", "salt", "prompt"}``.
- ``GET /_seen``: ``{"resets": [...], "requests": [...]}`` in arrival order.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from aiohttp import web

from tests.loadgen.common_routes import legacy_choice
from tests.loadgen.serve_app import run, serve

MAX_MODEL_LEN = 512
STATE: dict[str, Any] = {"inflight": 0, "blocks": 32, "refuse": False, "token_s": 0.002, "resets": [], "requests": []}


async def models(_: web.Request) -> web.Response:
    card = {"id": "m", "object": "model", "max_model_len": MAX_MODEL_LEN}
    return web.json_response({"object": "list", "data": [card]})


async def metrics(_: web.Request) -> web.Response:
    blocks = "" if STATE["blocks"] is None else f',num_gpu_blocks="{STATE["blocks"]}"'
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{model_name="m"}} {STATE["inflight"]}\n'
        "# TYPE vllm:cache_config_info gauge\n"
        f'vllm:cache_config_info{{block_size="16",enable_prefix_caching="True"{blocks}}} 1.0\n'
    )
    return web.Response(text=text, content_type="text/plain")


async def reset(request: web.Request) -> web.Response:
    external = request.query.get("reset_external", "").lower() == "true"
    STATE["resets"].append({"external": external, "running": STATE["inflight"]})
    return web.json_response({"success": not (STATE["refuse"] or STATE["inflight"])})


async def completions(request: web.Request) -> web.Response:
    body = await request.json()
    tokens, max_tokens = len(str(body["prompt"]).split()), int(body["max_tokens"])
    seen = {"tokens": tokens, "max_tokens": max_tokens, "salt": body.get("cache_salt"), "prompt": body["prompt"]}
    STATE["requests"].append(seen)
    if tokens + max_tokens > MAX_MODEL_LEN:
        message = f"This model's maximum context length is {MAX_MODEL_LEN} tokens; the request asks {tokens}"
        return web.json_response({"error": {"message": message}}, status=400)
    STATE["inflight"] += 1
    try:
        await asyncio.sleep(STATE["token_s"] * max_tokens)
    finally:
        STATE["inflight"] -= 1
    ids = [1000 + i for i in range(max_tokens)]
    usage = {"prompt_tokens": tokens, "completion_tokens": max_tokens, "total_tokens": tokens + max_tokens}
    choice = legacy_choice(ids, body, "length")
    return web.json_response(
        {"id": "x", "object": "text_completion", "model": "m", "choices": [choice], "usage": usage}
    )


async def seen(_: web.Request) -> web.Response:
    return web.json_response({"resets": STATE["resets"], "requests": STATE["requests"]})


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=32)
    parser.add_argument("--no-blocks", action="store_true")
    parser.add_argument("--refuse-reset", action="store_true")
    parser.add_argument("--token-s", type=float, default=0.002)
    args = parser.parse_args()
    STATE.update(blocks=None if args.no_blocks else args.blocks, refuse=args.refuse_reset, token_s=args.token_s)
    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/_seen", seen)
    app.router.add_post("/reset_prefix_cache", reset)
    app.router.add_post("/v1/completions", completions)
    await serve(app)


if __name__ == "__main__":
    run(main)
