"""The aiohttp application: OpenAI-compatible routes over the engine runner.

Why this module exists: it is the only place that speaks HTTP. Each generation handler
validates (4xx on any client mistake), submits to the engine thread, and either waits for the
finish or streams SSE chunks as tokens arrive, merging tokens that arrived together into one
chunk as vLLM does when a client lags. A client that disconnects gets its request aborted and
its slot freed. Numerics, scheduling and formatting live elsewhere.
"""

from __future__ import annotations

import time
import uuid
from importlib import metadata
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry

from loadgen.engine.metrics import metrics_registry, render
from loadgen.engine.protocol import MODEL_ID, ApiError, ParsedRequest, parse_request
from loadgen.engine.responses import Renderer
from loadgen.engine.runner import EngineRunner, RequestStream
from loadgen.engine.scheduler import EngineRequest, TokenEvent

RUNNER_KEY = web.AppKey("runner", EngineRunner)
METRICS_KEY = web.AppKey("metrics", CollectorRegistry)


def _json(body: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def _error(err: ApiError) -> web.Response:
    return _json(err.body(), err.status)


def _version() -> str:
    try:
        return metadata.version("batch-invariance-loadgen")
    except metadata.PackageNotFoundError:
        return "0+unknown"


async def _read_json(request: web.Request) -> object:
    raw = await request.read()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from exc


async def _generate(request: web.Request, chat: bool) -> web.StreamResponse:
    runner = request.app[RUNNER_KEY]
    sched = runner.scheduler
    try:
        parsed = parse_request(await _read_json(request), chat, sched.tokenizer, sched.model.w.config.max_model_len)
    except ApiError as err:
        return _error(err)
    prefix = "chatcmpl-" if chat else "cmpl-"
    response_id = prefix + (parsed.request_id or uuid.uuid4().hex)
    engine_id = f"{response_id}-{uuid.uuid4().hex[:8]}"
    stream = runner.submit(EngineRequest(engine_id, parsed.prompt_ids, parsed.params, parsed.cache_salt))
    renderer = Renderer(parsed, sched.tokenizer, response_id, int(time.time()))
    try:
        if parsed.stream:
            return await _stream(request, parsed, renderer, stream)
        events: list[TokenEvent] = []
        while True:
            got = await stream.next_events()
            if not got:
                break
            events.extend(got)
        return _json(renderer.full(events, stream.cached_tokens))
    finally:
        if not stream.finished:
            runner.abort(engine_id)


async def _stream(
    request: web.Request, parsed: ParsedRequest, renderer: Renderer, stream: RequestStream
) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)

    async def send(chunk: dict[str, Any]) -> None:
        await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")

    if parsed.chat:
        await send(renderer.role_chunk())
    while True:
        events = await stream.next_events()
        if not events:
            break
        await send(renderer.delta_chunk(events, stream.cached_tokens))
    if parsed.include_usage:
        await send(renderer.usage_chunk(stream.cached_tokens))
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=True)


async def models(request: web.Request) -> web.Response:
    cfg = request.app[RUNNER_KEY].scheduler.model.w.config
    card = {
        "id": MODEL_ID,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "loadgen",
        "root": MODEL_ID,
        "parent": None,
        "max_model_len": cfg.max_model_len,
        "permission": [],
    }
    return _json({"object": "list", "data": [card]})


async def health(_: web.Request) -> web.Response:
    return web.Response(status=200)


async def version(_: web.Request) -> web.Response:
    return _json({"version": _version()})


async def metrics(request: web.Request) -> web.Response:
    body = render(request.app[METRICS_KEY])
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


async def reset_prefix_cache(request: web.Request) -> web.Response:
    request.app[RUNNER_KEY].reset_prefix_cache()
    return web.Response(status=200)


@web.middleware
async def _errors_as_json(request: web.Request, handler: Any) -> web.StreamResponse:
    """aiohttp's own 404/405 become OpenAI-shaped JSON errors."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(ApiError(exc.status, f"{exc.reason}: {request.method} {request.path}"))


def build_app(runner: EngineRunner) -> web.Application:
    app = web.Application(middlewares=[_errors_as_json], client_max_size=4 * 1024 * 1024)
    app[RUNNER_KEY] = runner
    app[METRICS_KEY] = metrics_registry(runner.scheduler)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/reset_prefix_cache", reset_prefix_cache)
    return app
