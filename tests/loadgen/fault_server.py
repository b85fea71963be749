"""A tiny OpenAI-style server whose misbehaviour is chosen by the prompt, for the client's fault tests.

Run as ``python -m tests.loadgen.fault_server [--require-key KEY]``; prints ``READY http://127.0.0.1:PORT``.
Prompts: ``ok``, ``status:<code>`` (a JSON error), ``html:<code>`` (a 14-line HTML error page), ``reset``
(stream cut mid-body), ``nodone`` (stream without ``[DONE]``), ``malformed`` (a broken JSON chunk),
``error-in-stream``, ``slow`` (3 s before headers).
Hostile prompts: ``trickle`` (one body byte, or for a stream one ``: ping`` SSE comment, every 0.2 s
for ``TRICKLE_S`` seconds, then the end without a whole answer), ``huge`` or ``huge:<MiB>`` (3 MiB, or that
many, of body: a JSON string, or for a stream one endless line), ``too-many-tokens`` (5 tokens, whatever max_tokens
says), ``negative-id`` (a token id of -1), ``fewer-ids`` (2 ids for 3 tokens), ``echo-auth`` (the
request's Authorization header in the text, split over two token strings, in the alternatives and in the
answer's ``id``),
``hostile-numbers`` (logprobs of -1.7e308 and 1.7e308, alternatives' logprobs the strings ``"NaN"``,
``"-Infinity"`` and ``"Infinity"``, which a JSON parser takes as floats), ``more-ids`` (4 ids for 3 tokens,
non-streamed), ``usage:negative``, ``usage:huge``, ``usage:string``, ``usage:cached`` (a non-streamed
answer whose usage is impossible: a negative count, 1e15, a string, cached tokens above the prompt),
``escapes`` (a middle token holding ESC, an OSC title, BEL and NUL, with a different one every other
request, so the completions fork there), ``batch-sizes:<n>`` (a non-streamed answer whose ``x_batch_sizes``
says every step ran ``n`` sequences: the embedded engine's extension, with any number in it).

For the bad-input and secrets tests: ``--require-key KEY`` answers 401 on ``/v1/*`` unless the request
carries ``Authorization: Bearer KEY``; ``/html/...`` is a web page, not an API (200, text/html);
``/to/<port>/<path>`` redirects (307) to ``http://127.0.0.1:<port>/<path>``; ``GET /_seen`` (not
itself counted) tells what the server saw: request count, Authorization values, prompts.
Under ``/echo`` (a base URL of ``http://host:port/echo``) ``/v1/models`` and ``/version`` echo the
Authorization header back; under ``/hostile`` every completion is a 503 whose body echoes it among
terminal escapes (ESC, an OSC title, BEL, NUL). Under ``/evil`` the one model's id is Markdown and
HTML (a code span's end, an image, a heading on a new line) with terminal escapes. Under ``/tokenless``
a completion request without logprobs (background traffic) is answered at once with no token. Under
``/dying/<key>/<n>`` the first ``n`` completion requests (counted per key) are answered, every later
one is cut before any byte: an endpoint that dies mid-run. ``/metrics`` answers only a request with an
Authorization header: once (per header value) with a vLLM gauge, then with a 503 whose reason phrase
echoes the header. Under ``/buffered`` every answer comes ``BUFFER_S`` late and whole, as through a
buffering proxy: a stream's every event (its three tokens and ``[DONE]``) in one write, so its first and
last token arrive together. Under ``/bigconfig`` ``/server_info`` (vLLM's dev-mode config) states a 20 MB
``dtype`` and an attention backend of terminal escapes; completions as usual.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from collections.abc import Awaitable, Callable
from itertools import accumulate

from aiohttp import web
from aiohttp.typedefs import Middleware

from tests.loadgen.common_routes import models
from tests.loadgen.serve_app import run, serve

SEEN: dict[str, Counter[str]] = {
    "requests": Counter(),
    "authorization": Counter(),
    "prompts": Counter(),
    "escapes": Counter(),
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

TOKENS = [("Hello", 101, -0.1), (" world", 102, -0.25), ("!", 103, -0.5)]
HUGE = 1.7e308
NUMBERS = [("Hello", 101, -HUGE), (" world", 102, HUGE), ("!", 103, -0.5)]
NUMBER_TOPS = [{"Hello": "NaN", "Hi": "-Infinity"}, {" world": HUGE, " there": -HUGE}, {"!": "Infinity", "?": -1.0}]
ESCAPES = ["\x1b]0;owned\x07", "\x1b[2J\x00"]
EVIL_MODEL = "m`</code><img src=x onerror=alert(1)>\n# pwned ![t](http://evil.example/t.png) \x1b]0;owned\x07\x00"
DYING: Counter[str] = Counter()
METRICS_SEEN: Counter[str] = Counter()
BUFFER_S = 0.3  # what a buffering proxy holds an answer back for: the engine's whole generation
TRICKLE_S = 10.0  # long enough that only a total deadline ends a trickle sooner
MIB = 1024 * 1024
Token = tuple[str, int, float]
IMPOSSIBLE_USAGE: dict[str, object] = {  # usage no engine reports, for a non-streamed answer of 3 tokens
    "usage:negative": {"prompt_tokens": -5, "completion_tokens": 3, "total_tokens": -2},
    "usage:huge": {"prompt_tokens": 2, "completion_tokens": 1e15, "total_tokens": 1e15},
    "usage:string": {"prompt_tokens": "two", "completion_tokens": 3, "total_tokens": 5},
    "usage:cached": {"prompt_tokens": 2, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 50}},
}


def tokens_for(prompt: str, auth: str) -> list[Token]:
    """The answer's tokens: the usual three, or the misbehaviour the prompt selects."""
    if prompt == "too-many-tokens":
        return [*TOKENS, ("?", 104, -0.7), ("!", 103, -0.9)]
    if prompt == "negative-id":
        return [TOKENS[0], (" world", -1, -0.25), TOKENS[2]]
    if prompt == "echo-auth":
        half = len(auth) // 2
        return [("Hello ", 101, -0.1), (auth[:half], 102, -0.2), (auth[half:], 103, -0.3)]
    if prompt == "hostile-numbers":
        return NUMBERS
    if prompt == "escapes":
        SEEN["escapes"]["n"] += 1
        odd = SEEN["escapes"]["n"] % 2
        return [TOKENS[0], (ESCAPES[odd], 102 + 2 * odd, -0.2), TOKENS[2]]
    return TOKENS


def chunk(i: int, tokens: list[Token] = TOKENS, *, drop_id: bool = False, answer_id: str = "c") -> bytes:
    tok, tid, lp = tokens[i]
    body = {
        "id": answer_id,
        "object": "text_completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "text": tok,
                "token_ids": [] if drop_id else [tid],
                "finish_reason": "length" if i == len(tokens) - 1 else None,
                "logprobs": {"tokens": [tok], "token_logprobs": [lp], "top_logprobs": [{tok: lp}], "text_offset": [0]},
            }
        ],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def whole(tokens: list[Token] = TOKENS, *, fewer_ids: bool = False) -> dict[str, object]:
    ids = [t for _, t, _ in tokens]
    return {
        "id": "c",
        "object": "text_completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "text": "".join(t for t, _, _ in tokens),
                "token_ids": ids[:-1] if fewer_ids else ids,
                "finish_reason": "length",
                "logprobs": {
                    "tokens": [t for t, _, _ in tokens],
                    "token_logprobs": [lp for _, _, lp in tokens],
                    "top_logprobs": [{t: lp} for t, _, lp in tokens],
                    "text_offset": list(accumulate((len(t) for t, _, _ in tokens[:-1]), initial=0)),
                },
            }
        ],
        "usage": {"prompt_tokens": 2, "completion_tokens": len(tokens), "total_tokens": 2 + len(tokens)},
    }


async def models_echo(request: web.Request) -> web.Response:
    auth = request.headers.get("Authorization", "")
    return web.json_response({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": auth}]})


async def version_echo(request: web.Request) -> web.Response:
    return web.json_response({"version": f"fault-server; you sent {request.headers.get('Authorization', '')}"})


async def hostile(request: web.Request) -> web.Response:
    """A 503 whose body would retitle a terminal, clear it, ring its bell, and echoes the key."""
    auth = request.headers.get("Authorization", "")
    text = f"\x1b]0;owned\x07\x1b[2J\x00overloaded; you sent {auth}\x1b[0m"
    return web.Response(status=503, text=text, content_type="text/plain")


async def trickle(request: web.Request, stream: bool) -> web.StreamResponse:
    """Alive but never done: each wait for a byte is short, the answer never completes."""
    headers = {"Content-Type": "text/event-stream"} if stream else {"Content-Type": "application/json"}
    resp = web.StreamResponse(headers=headers)
    if not stream:
        resp.content_length = 1_000_000
    await resp.prepare(request)
    t0 = asyncio.get_running_loop().time()
    while asyncio.get_running_loop().time() - t0 < TRICKLE_S:
        await resp.write(b": ping\n\n" if stream else b" ")
        await asyncio.sleep(0.2)
    assert request.transport is not None
    request.transport.close()
    return resp


async def huge(request: web.Request, stream: bool, mib: int) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream" if stream else "application/json"})
    await resp.prepare(request)
    await resp.write(b'data: {"x": "' if stream else b'{"x": "')
    block = b"x" * 65536
    for _ in range(mib * MIB // len(block)):
        await resp.write(block)
    await resp.write(b'"}\n\n' if stream else b'"}')
    await resp.write_eof()
    return resp


async def completions(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    prompt = str(body.get("prompt", ""))
    stream = bool(body.get("stream"))
    auth = request.headers.get("Authorization", "")
    tokens = tokens_for(prompt, auth)
    answer_id = f"cmpl-{auth}" if prompt == "echo-auth" else "c"
    if prompt.startswith("status:"):
        code = int(prompt.split(":")[1])
        return web.json_response({"error": {"message": f"injected {code}", "type": "x", "code": code}}, status=code)
    if prompt.startswith("html:"):
        return web.Response(text=ERROR_PAGE, content_type="text/html", status=int(prompt.split(":")[1]))
    if prompt == "slow":
        await asyncio.sleep(3)
    if prompt == "trickle":
        return await trickle(request, stream)
    if prompt == "huge" or prompt.startswith("huge:"):
        return await huge(request, stream, int(prompt.partition(":")[2] or 3))
    if not stream:
        if prompt == "malformed":
            return web.Response(text="{not json", content_type="application/json")
        answer = whole(tokens, fewer_ids=prompt == "fewer-ids")
        answer["id"] = answer_id
        if prompt == "hostile-numbers":
            answer["choices"][0]["logprobs"]["top_logprobs"] = NUMBER_TOPS  # type: ignore[index]
        if prompt == "more-ids":
            answer["choices"][0]["token_ids"].append(104)  # type: ignore[index]
        if prompt in IMPOSSIBLE_USAGE:
            answer["usage"] = IMPOSSIBLE_USAGE[prompt]
        if prompt.startswith("batch-sizes:"):
            answer["x_batch_sizes"] = [int(prompt.partition(":")[2])] * len(tokens)
        return web.json_response(answer)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(chunk(0, tokens, answer_id=answer_id))
    if prompt == "reset":
        assert request.transport is not None
        request.transport.abort()
        return resp
    if prompt == "malformed":
        await resp.write(b"data: {not json\n\n")
    if prompt == "error-in-stream":
        await resp.write(b'data: {"error": {"message": "out of KV blocks"}}\n\n')
    for i in range(1, len(tokens)):
        await resp.write(chunk(i, tokens, drop_id=prompt == "fewer-ids" and i == len(tokens) - 1, answer_id=answer_id))
    if prompt != "nodone":
        await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def tokenless(request: web.Request) -> web.StreamResponse:
    """Under ``/tokenless``: a request without logprobs (background traffic) is answered at once with no
    token, so a background slot is never seen started and a level is never held; any other as usual."""
    body = await request.json()
    if body.get("logprobs"):
        return await completions(request)
    if not body.get("stream"):
        return web.json_response(whole([]))
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def buffered(request: web.Request) -> web.StreamResponse:
    """Under ``/buffered``: the usual answer after ``BUFFER_S``, a stream's events all in one write."""
    body = await request.json()
    await asyncio.sleep(BUFFER_S)
    if not body.get("stream"):
        return web.json_response(whole())
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b"".join(chunk(i) for i in range(len(TOKENS))) + b"data: [DONE]\n\n")
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


async def evil_models(_: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": EVIL_MODEL, "object": "model"}]})


async def dying(request: web.Request) -> web.StreamResponse:
    """Answers the first ``n`` completion requests under ``/dying/<key>/<n>``, then cuts every later one."""
    key = request.match_info["key"]
    DYING[key] += 1
    if DYING[key] > int(request.match_info["n"]):
        assert request.transport is not None
        request.transport.abort()
        return web.Response()
    return await completions(request)


async def metrics(request: web.Request) -> web.Response:
    """A vLLM gauge once per Authorization value, then a 503 whose reason phrase echoes it."""
    auth = request.headers.get("Authorization")
    if auth is None:
        raise web.HTTPNotFound()
    METRICS_SEEN[auth] += 1
    if METRICS_SEEN[auth] == 1:
        return web.Response(
            text="vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n", content_type="text/plain"
        )
    return web.Response(status=503, reason=f"overloaded; you sent {auth}")


async def big_config(_: web.Request) -> web.Response:
    """vLLM's ``/server_info?config_format=json`` with settings no engine states: 20 MB, and terminal escapes."""
    config = {
        "model_config": {"dtype": "bfloat16" + "x" * (20 * MIB), "enforce_eager": False},
        "attention_config": {"backend": "\x1b]0;owned\x07FLASH" * 1000},
        "cache_config": {"enable_prefix_caching": True, "block_size": 16},
    }
    return web.json_response({"vllm_config": config, "vllm_env": {"VLLM_BATCH_INVARIANT": "0"}})


async def seen(_: web.Request) -> web.Response:
    return web.json_response({k: dict(v) for k, v in SEEN.items()})


ERROR_PAGE = "\n".join(
    ["<!DOCTYPE html>", "<html>", "<head><title>Not Found</title></head>", "<body>"]
    + [f"<p>line {i} of a proxy's error page</p>" for i in range(8)]
    + ["</body>", "</html>"]
)


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
    app.router.add_get("/echo/v1/models", models_echo)
    app.router.add_get("/echo/version", version_echo)
    app.router.add_post("/echo/v1/completions", completions)
    app.router.add_get("/hostile/v1/models", models)
    app.router.add_post("/hostile/v1/completions", hostile)
    app.router.add_get("/evil/v1/models", evil_models)
    app.router.add_post("/evil/v1/completions", completions)
    app.router.add_get("/dying/{key}/{n}/v1/models", models)
    app.router.add_post("/dying/{key}/{n}/v1/completions", dying)
    app.router.add_get("/tokenless/v1/models", models)
    app.router.add_post("/tokenless/v1/completions", tokenless)
    app.router.add_get("/buffered/v1/models", models)
    app.router.add_post("/buffered/v1/completions", buffered)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/bigconfig/v1/models", models)
    app.router.add_post("/bigconfig/v1/completions", completions)
    app.router.add_get("/bigconfig/server_info", big_config)
    app.router.add_route("*", "/html/{tail:.*}", html)
    app.router.add_route("*", r"/to/{port:\d+}/{tail:.*}", redirect)
    await serve(app)


if __name__ == "__main__":
    run(main)
