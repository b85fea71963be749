"""An OpenAI-style server whose cache field and by-source counters say what the test chooses (cache-field checks).

Run as ``python -m tests.loadgen.kv_source_server --prompt-tokens P --cached C --local L --external E
[--trace FILE]``; prints ``READY http://127.0.0.1:PORT``. Every ``/v1/completions`` answer (three tokens, streamed
or not, ids and logprobs when asked) reports ``usage.prompt_tokens`` P and ``prompt_tokens_details.cached_tokens``
C; each request adds L to ``vllm:prompt_tokens_by_source_total{source="local_cache_hit"}``, E to
``external_kv_transfer`` and P - L - E to ``local_compute`` (vLLM 0.26's series, with ``prompt_tokens_cached_total``)
when it arrives, then answers 0.2 s later, so a 10 ms scraper samples before and after it alone. ``--trace FILE``
also writes one engine step line per request (its first row carrying ``local`` L and ``external`` E), keyed by the
request's ``X-Request-Id``, as an engine's step trace does (docs/design.md, "The engine step trace").
``--offload-gib G`` states a tier of G GiB in ``vllm:cache_config_info``'s ``kv_offloading_size`` and serves its
store/load byte counters, which never move.

With ``--prefill URL --decode URL`` it is a router-like proxy instead: each completion goes to the prefill server
with ``max_tokens`` 1, then whole to the decode server, whose answer it returns as it is (as vllm-router passes on
the decode server's usage); its own ``/metrics`` serves no engine series.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from aiohttp import ClientSession, web

from tests.loadgen.common_routes import end_stream, legacy_choice, models
from tests.loadgen.serve_app import run, serve

IDS = [101, 102, 103]
STATE: dict[str, Any] = {"inflight": 0, "computed": 0, "local": 0, "external": 0, "step": 0}


def metrics_text(args: argparse.Namespace) -> str:
    labels = 'model_name="m",engine="0"'
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{labels}}} {STATE['inflight']}",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{labels}}} 0",
        "# TYPE vllm:cache_config_info gauge",
        f'vllm:cache_config_info{{block_size="16",kv_offloading_size="{args.offload_gib}"}} 1.0',
        "# TYPE vllm:prompt_tokens_by_source counter",
    ]
    for source, key in (
        ("local_compute", "computed"),
        ("local_cache_hit", "local"),
        ("external_kv_transfer", "external"),
    ):
        lines.append(f'vllm:prompt_tokens_by_source_total{{{labels},source="{source}"}} {float(STATE[key])}')
    lines += [
        "# TYPE vllm:prompt_tokens_cached counter",
        f"vllm:prompt_tokens_cached_total{{{labels}}} {float(STATE['local'] + STATE['external'])}",
    ]
    if args.offload_gib != "None":  # a tier that never stores nor loads anything
        lines += [
            "# TYPE vllm:kv_offload_store_bytes counter",
            f"vllm:kv_offload_store_bytes_total{{{labels}}} 0.0",
            "# TYPE vllm:kv_offload_load_bytes counter",
            f"vllm:kv_offload_load_bytes_total{{{labels}}} 0.0",
        ]
    return "\n".join(lines) + "\n"


def trace_line(args: argparse.Namespace, request_id: str) -> None:
    """The request's one prefill step, as an engine writes it: ``computed`` its cached tokens, then the rest."""
    cached = args.local + args.external
    row = {
        "schema": 1,
        "step": STATE["step"],
        "t": time.time(),
        "ids": [f"cmpl-{request_id}-0"],
        "scheduled": [args.prompt_tokens - cached],
        "computed": [cached],
        "prompt": [args.prompt_tokens],
        "local": [args.local],
        "external": [args.external],
        "source": "embedded",
        "preempted": [],
    }
    STATE["step"] += 1
    with open(args.trace, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")


def engine_app(args: argparse.Namespace) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=metrics_text(args), content_type="text/plain")

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        STATE["inflight"] += 1
        STATE["local"] += args.local
        STATE["external"] += args.external
        STATE["computed"] += args.prompt_tokens - args.local - args.external
        if args.trace:
            trace_line(args, request.headers.get("X-Request-Id", ""))
        try:
            await asyncio.sleep(0.2)
        finally:
            STATE["inflight"] -= 1
        ids = IDS[: int(body.get("max_tokens") or len(IDS))]
        usage = {
            "prompt_tokens": args.prompt_tokens,
            "completion_tokens": len(ids),
            "total_tokens": args.prompt_tokens + len(ids),
            "prompt_tokens_details": {"cached_tokens": args.cached},
        }
        if not body.get("stream"):
            choice = legacy_choice(ids, body, "length")
            return web.json_response(
                {"id": "c", "object": "text_completion", "model": "m", "choices": [choice], "usage": usage}
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i, tid in enumerate(ids):
            choice = legacy_choice([tid], body, "length" if i == len(ids) - 1 else None)
            chunk = {"id": "c", "object": "text_completion", "model": "m", "choices": [choice]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        return await end_stream(resp, body, "text_completion", usage)

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/completions", completions)
    return app


def router_app(args: argparse.Namespace) -> web.Application:
    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        headers = {k: v for k, v in request.headers.items() if k.lower() == "x-request-id"}
        async with ClientSession() as http:
            leg = {**body, "max_tokens": 1, "stream": False}
            async with http.post(f"{args.prefill}/v1/completions", json=leg, headers=headers) as r:
                await r.read()
            async with http.post(f"{args.decode}/v1/completions", json=body, headers=headers) as r:
                answer = await r.read()
                kind = r.headers.get("Content-Type", "application/json")
        return web.Response(body=answer, content_type=kind.split(";")[0])

    async def no_metrics(_: web.Request) -> web.Response:
        return web.Response(status=405)

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", no_metrics)
    app.router.add_post("/v1/completions", completions)
    return app


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--prompt-tokens", type=int, default=40)
    p.add_argument("--cached", type=int, default=0)
    p.add_argument("--local", type=int, default=0)
    p.add_argument("--external", type=int, default=0)
    p.add_argument("--trace", default="")
    p.add_argument("--offload-gib", default="None")  # kv_offloading_size as vLLM states it; "None": no tier
    p.add_argument("--prefill", default="")
    p.add_argument("--decode", default="")
    args = p.parse_args()
    await serve(router_app(args) if args.prefill else engine_app(args))


if __name__ == "__main__":
    run(main)
