"""A tiny OpenAI-style server whose misbehaviour is chosen by the prompt, for the client's fault tests.

Run as ``python fault_server.py [--require-key KEY]``; prints ``READY http://127.0.0.1:PORT``.
Prompts: ``ok``, ``status:<code>``, ``reset`` (stream cut mid-body), ``nodone`` (stream without
``[DONE]``), ``malformed`` (a broken JSON chunk), ``error-in-stream``, ``slow`` (3 s before headers).

For the bad-input and secrets tests: ``--require-key KEY`` answers 401 on ``/v1/*`` unless the request
carries ``Authorization: Bearer KEY``; ``/html/...`` is a web page, not an API (200, text/html);
``/to/<port>/<path>`` redirects (307) to ``http://127.0.0.1:<port>/<path>``; ``GET /_seen`` (not
itself counted) tells what the server saw: request count, Authorization values, prompts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

SEEN: dict[str, Counter[str]] = {"requests": Counter(), "authorization": Counter(), "prompts": Counter()}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

TOKENS = [("Hello", 101, -0.1), (" world", 102, -0.25), ("!", 103, -0.5)]


def chunk(i: int) -> bytes:
    tok, tid, lp = TOKENS[i]
    body = {
        "id": "c",
        "object": "text_completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "text": tok,
                "token_ids": [tid],
                "finish_reason": "length" if i == len(TOKENS) - 1 else None,
                "logprobs": {"tokens": [tok], "token_logprobs": [lp], "top_logprobs": [{tok: lp}], "text_offset": [0]},
            }
        ],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def whole() -> dict[str, object]:
    return {
        "id": "c",
        "object": "text_completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "text": "".join(t for t, _, _ in TOKENS),
                "token_ids": [t for _, t, _ in TOKENS],
                "finish_reason": "length",
                "logprobs": {
                    "tokens": [t for t, _, _ in TOKENS],
                    "token_logprobs": [lp for _, _, lp in TOKENS],
                    "top_logprobs": [{t: lp} for t, _, lp in TOKENS],
                    "text_offset": [0, 5, 11],
                },
            }
        ],
        "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5},
    }


async def models(_: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})


async def completions(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    prompt = str(body.get("prompt", ""))
    if prompt.startswith("status:"):
        code = int(prompt.split(":")[1])
        return web.json_response({"error": {"message": f"injected {code}", "type": "x", "code": code}}, status=code)
    if prompt == "slow":
        await asyncio.sleep(3)
    if not body.get("stream"):
        if prompt == "malformed":
            return web.Response(text="{not json", content_type="application/json")
        return web.json_response(whole())
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(chunk(0))
    if prompt == "reset":
        assert request.transport is not None
        request.transport.abort()
        return resp
    if prompt == "malformed":
        await resp.write(b"data: {not json\n\n")
    if prompt == "error-in-stream":
        await resp.write(b'data: {"error": {"message": "out of KV blocks"}}\n\n')
    await resp.write(chunk(1) + chunk(2))
    if prompt != "nodone":
        await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


def _prompt_of(body: object) -> str | None:
    if not isinstance(body, dict):
        return None
    if "prompt" in body:
        return str(body["prompt"])
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        return str(messages[-1].get("content"))
    return None


def watch(required_key: str | None) -> Middleware:
    """Count what arrives, and refuse ``/v1/*`` without the right key when one is required."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == "/_seen":
            return await handler(request)
        auth = request.headers.get("Authorization", "")
        SEEN["requests"][f"{request.method} {request.path}"] += 1
        SEEN["authorization"][auth] += 1
        if request.can_read_body:
            try:
                prompt = _prompt_of(json.loads(await request.read()))
            except ValueError:
                prompt = None
            if prompt is not None:
                SEEN["prompts"][prompt] += 1
        if required_key is not None and request.path.startswith("/v1/") and auth != f"Bearer {required_key}":
            error = {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": 401}
            return web.json_response({"error": error}, status=401)
        return await handler(request)

    return middleware


async def seen(_: web.Request) -> web.Response:
    return web.json_response({k: dict(v) for k, v in SEEN.items()})


async def html(_: web.Request) -> web.Response:
    return web.Response(text="<!doctype html><html><body>Admin console</body></html>", content_type="text/html")


async def redirect(request: web.Request) -> web.Response:
    raise web.HTTPTemporaryRedirect(f"http://127.0.0.1:{request.match_info['port']}/{request.match_info['tail']}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--require-key", default=None)
    args = parser.parse_args()
    app = web.Application(middlewares=[watch(args.require_key)])
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/_seen", seen)
    app.router.add_route("*", "/html/{tail:.*}", html)
    app.router.add_route("*", r"/to/{port:\d+}/{tail:.*}", redirect)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"READY http://127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
