"""The aiohttp application: OpenAI-compatible routes over the engine runner.

Why this module exists: it is the only place that speaks HTTP. Each generation handler
validates (4xx on any client mistake), submits to the engine thread, and either waits for the
finish or streams SSE chunks as tokens arrive, merging tokens that arrived together into one
chunk as vLLM does when a client lags. A client that disconnects gets its request aborted and
its slot freed. ``/metrics`` formats the engine thread's last snapshot (loadgen/engine/metrics.py):
it never reads live scheduler state and never waits for a step. With ``--fault-*`` flags it applies
the fault plan (loadgen/engine/faults.py) here, at the HTTP layer, and counts applied faults on
``/metrics``; without them every answer is untouched.
Numerics, scheduling and formatting live elsewhere. The prefill and decode roles' part of HTTP (the
``kv_transfer_params`` legs, the ``/kv/{transfer_id}`` side channel, the decode server's fetch) is in
loadgen/engine/pd.py, called from here; ``/v1/completions/render`` and ``/v1/chat/completions/render``
answer the prompt's token ids in vLLM's ``GenerateRequest`` shape (vllm-router asks for them to route).

Extension ``"x_batch_sizes": true`` (both routes, streamed or not; off unless asked): the ground truth
of the load tool's concurrency axis. The answer gets a top-level ``"x_batch_sizes": [n1, n2, ...]``,
one integer per engine step the request had a row in, in step order, each the number of sequences
that step ran (its prefill step first, then one per decode step; so as many entries as completion
tokens). Streamed, it rides on the chunk that carries ``finish_reason`` (never on the usage chunk,
which exists only with ``include_usage``). A request that does not ask gets no such key. With a list of
several prompts it moves onto each choice (``choices[i].x_batch_sizes``; streamed, onto the choice of the
chunk that carries that prompt's ``finish_reason``), since each prompt has its own steps.

A completions ``prompt`` may be a list (vLLM's shape): every prompt is submitted to the engine thread in
one hand-over before any is awaited, so they enter the scheduler together and share their steps (what a
client sends a list for: N requests arriving at one instant). One choice per prompt, ``index`` its place;
usage summed; streamed, each prompt's chunks go out as its tokens come, under its index, then one usage
chunk and one ``[DONE]``. One fault is drawn for the whole request; a client gone aborts every prompt.

Request ids, as vLLM's: the base id is the ``X-Request-Id`` header (printable ASCII, at most 128 characters;
otherwise ignored), else the body's ``request_id``, else a fresh one; the answer's ``id`` is ``cmpl-<base>``
(chat: ``chatcmpl-<base>``) and each prompt's engine request id that plus ``-`` and 8 random hex digits, so two
requests in flight under one header never share an engine id. The step trace names requests by engine id.

``n`` > 1: each prompt's n choices are n engine requests submitted together (ids ``<j>_<prompt's id>``, as vLLM
names a parent's children), seeded ``seed + j`` when seeded (``ParsedRequest.choices``); choice ``index`` is
prompt * n + j. ``prompt_logprobs`` (completions, unstreamed) puts each prompt's re-score on its choices; it
is refused with ``kv_transfer_params`` (a handed-over KV computes no prompt row) and on a backend without it.

Why this length: the handlers share one request life (validate, submit, await or stream, abort on disconnect,
apply a fault, render), and splitting them by route would repeat that life in each module or hide it behind
callbacks; the renderers, the protocol checks and the prefill/decode legs already live in modules of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from loadgen.engine import pd
from loadgen.engine.faults import REFUSED, Fault, FaultCounters, FaultPlan, malformed, strip_identity
from loadgen.engine.kvcache import BLOCK_TOKENS
from loadgen.engine.kvwire import HandedKV, ModelShape
from loadgen.engine.metrics import cache_config_info, render
from loadgen.engine.middleware import BIND_HOST_KEY, errors_as_json, guard
from loadgen.engine.protocol import (
    MODEL_ID,
    REQUEST_ID_HEADER,
    ApiError,
    ParsedRequest,
    check_prompt_logprobs,
    header_request_id,
    parse_request,
    query_flag,
)
from loadgen.engine.responses import Renderer, generate_requests, merged_body, summed_usage
from loadgen.engine.runner import EngineDead, EngineRunner, RequestStream
from loadgen.engine.scheduler import EngineRequest, TokenEvent


@dataclass(frozen=True)
class Served:
    """What the engine says about its own settings (``/server_info``, ``vllm:cache_config_info``), and whether
    usage carries ``prompt_tokens_details`` (vLLM: only with ``--enable-prompt-tokens-details``)."""

    prefix_caching: bool = True
    batch_invariant: bool = False
    max_num_seqs: int = 64
    prompt_tokens_details: bool = True
    num_gpu_blocks: int = 1024  # the prefix cache's capacity in blocks (vLLM: the GPU KV cache's)
    kv_offloading_size: float | None = None  # the offload tier's GiB; None: no tier


RUNNER_KEY = web.AppKey("runner", EngineRunner)
SERVED_KEY = web.AppKey("served", Served)
METRICS_KEY = web.AppKey("metrics", CollectorRegistry)
FAULTS_KEY = web.AppKey("faults", FaultPlan)
FAULT_COUNTERS_KEY = web.AppKey("fault_counters", FaultCounters)


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


def _draw_fault(request: web.Request, stream: bool) -> Fault | None:
    """This request's fault: None without ``--fault-*`` flags, ``refused`` inside the refusal window."""
    plan = request.app.get(FAULTS_KEY)
    if plan is None:
        return None
    counters = request.app[FAULT_COUNTERS_KEY]
    index = counters.next_index()
    if index < plan.skip:
        return None
    now = time.monotonic()
    counters.first_at = now if counters.first_at is None else counters.first_at
    if plan.refused(now - counters.first_at):
        counters.injected[REFUSED] += 1
        return Fault(REFUSED)
    fault = plan.decide(index)
    if fault is None or (fault.kind == "no_done" and not stream):  # only a stream has a [DONE] to leave out
        return None
    counters.injected[fault.kind] += 1
    return fault


def _model_shape(runner: EngineRunner) -> ModelShape:
    cfg, tok = runner.scheduler.model.w.config, runner.scheduler.tokenizer
    return ModelShape(cfg.n_layers, cfg.n_heads, cfg.head_dim, tok.vocab_size, cfg.max_model_len)


async def _generate(request: web.Request, chat: bool) -> web.StreamResponse:
    runner = request.app[RUNNER_KEY]
    sched = runner.scheduler
    try:
        body_in = await _read_json(request)
        parsed = parse_request(body_in, chat, sched.tokenizer, sched.model.w.config.max_model_len)
        transfer = pd.transfer_of(request.app, body_in, parsed.stream, parsed.choice_count)
        check_prompt_logprobs(parsed, transfer is not None, sched.serves_prompt_logprobs)
    except ApiError as err:
        return _error(err)
    fault = _draw_fault(request, parsed.stream)
    if fault is not None and fault.kind == REFUSED:
        assert request.transport is not None
        request.transport.abort()  # before any byte; aiohttp drops the answer to a closed transport quietly
        return web.Response()
    if fault is not None and fault.kind == "status":
        assert fault.status is not None
        resp = _error(ApiError(fault.status, f"fault injection: HTTP {fault.status}"))
        if fault.retry_after_s is not None:
            resp.headers["Retry-After"] = str(fault.retry_after_s)
        return resp
    if fault is not None and fault.delay_s is not None:
        await asyncio.sleep(fault.delay_s)  # no byte before the delay: the client waits for headers
    handed: HandedKV | None = None
    if transfer is not None and transfer.fetch_from is not None:
        try:
            handed = await pd.fetch(request.app, transfer.fetch_from, parsed.prompt_ids, _model_shape(runner))
        except ApiError as err:
            return _error(err)
    hand_over = transfer is not None and transfer.hand_over
    response_id = _response_id(request, parsed)
    parts = parsed.choices()
    prompt_ids = [f"{response_id}-{uuid.uuid4().hex[:8]}" for _ in parsed.prompts]
    engine_ids = [
        prompt_ids[i // parsed.n] if parsed.n == 1 else f"{i % parsed.n}_{prompt_ids[i // parsed.n]}"
        for i in range(len(parts))
    ]
    reqs = [
        EngineRequest(rid, p.prompt_ids, p.params, p.cache_salt, hand_over, handed)
        for rid, p in zip(engine_ids, parts, strict=True)
    ]
    try:
        streams = runner.submit_all(reqs)  # every choice before any is awaited: they enter the scheduler together
    except EngineDead as dead:
        return _error(ApiError(503, str(dead)))
    details, created = request.app[SERVED_KEY].prompt_tokens_details, int(time.time())
    renderers = [
        Renderer(p, sched.tokenizer, response_id, created, index=i, child=i % parsed.n, prompt_tokens_details=details)
        for i, p in enumerate(parts)
    ]
    try:
        if parsed.stream:
            return await _stream(request, parsed, renderers, streams, fault)
        try:
            body = await _full_body(parsed, renderers, streams)
        except EngineDead as dead:
            return _error(ApiError(503, str(dead)))
        if hand_over:  # one prompt: pd.transfer_of refuses kv_transfer_params with several
            try:
                body["kv_transfer_params"] = pd.hand_over(request.app, reqs[0].request_id, streams[0].handed)
            except ApiError as err:
                return _error(err)
        if fault is None:
            return _json(body)
        return await _faulty_body(request, strip_identity(body, fault.kind), fault)
    finally:
        for req, stream in zip(reqs, streams, strict=True):
            if not stream.finished:
                runner.abort(req.request_id)


def _response_id(request: web.Request, parsed: ParsedRequest) -> str:
    """``cmpl-<base>`` or ``chatcmpl-<base>``: the header's id, else the body's, else a fresh one (as vLLM)."""
    base = header_request_id(request.headers.get(REQUEST_ID_HEADER)) or parsed.request_id or uuid.uuid4().hex
    return ("chatcmpl-" if parsed.chat else "cmpl-") + base


def _put_batch_sizes(target: dict[str, Any], sizes: list[int], several: bool) -> None:
    """``x_batch_sizes`` on the body or chunk of a single prompt; on the choice when a request has several."""
    (target["choices"][0] if several else target)["x_batch_sizes"] = sizes


async def _full_body(parsed: ParsedRequest, renderers: list[Renderer], streams: list[RequestStream]) -> dict[str, Any]:
    """The non-streamed answer: each prompt's body in turn (the others' tokens wait in their streams), merged."""
    bodies = []
    for renderer, stream in zip(renderers, streams, strict=True):
        events: list[TokenEvent] = []
        while got := await stream.next_events():
            events.extend(got)
        body = renderer.full(events, stream.cached_tokens, stream.prompt_logprobs)
        if parsed.x_batch_sizes:
            _put_batch_sizes(body, stream.batch_sizes, len(streams) > 1)
        bodies.append((renderer, body))
    return merged_body(bodies)


async def _faulty_body(request: web.Request, body: dict[str, Any], fault: Fault) -> web.StreamResponse:
    payload = orjson.dumps(body)
    if fault.kind == "malformed":
        return web.Response(body=malformed(payload), content_type="application/json")
    if fault.kind != "reset":
        return _json(body)
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    resp.content_length = len(payload)
    await resp.prepare(request)
    await resp.write(payload[: len(payload) // 2])
    assert request.transport is not None
    request.transport.abort()
    return resp


async def _arrivals(streams: list[RequestStream]) -> AsyncGenerator[tuple[int, list[TokenEvent]], None]:
    """Each stream's events as they arrive, with the stream's index, until every stream has finished.

    One stream is read directly; several get a reader task each, feeding one queue (cancelled when the caller
    stops early: close this generator, e.g. with ``contextlib.aclosing``)."""
    if len(streams) == 1:
        while events := await streams[0].next_events():
            yield 0, events
        return
    arrived: asyncio.Queue[tuple[int, list[TokenEvent] | EngineDead]] = asyncio.Queue()

    async def read(index: int, stream: RequestStream) -> None:
        try:
            while events := await stream.next_events():
                arrived.put_nowait((index, events))
        except EngineDead as dead:
            arrived.put_nowait((index, dead))  # raised to the caller, below
        arrived.put_nowait((index, []))  # this stream is done

    readers = [asyncio.create_task(read(i, s)) for i, s in enumerate(streams)]
    try:
        running = len(streams)
        while running:
            index, got = await arrived.get()
            if isinstance(got, EngineDead):
                raise got
            if got:
                yield index, got
            else:
                running -= 1
    finally:
        for reader in readers:
            reader.cancel()


async def _stream(
    request: web.Request,
    parsed: ParsedRequest,
    renderers: list[Renderer],
    streams: list[RequestStream],
    fault: Fault | None,
) -> web.StreamResponse:
    """SSE: chunks as tokens arrive, each carrying one choice (of a prompt list: its ``index``, interleaved as
    the prompts' tokens come), then the usage chunk (summed over the prompts) and one ``[DONE]``."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    kind = fault.kind if fault is not None else None
    deltas = 0

    async def send(chunk: dict[str, Any], first_delta: bool = False) -> None:
        payload = orjson.dumps(strip_identity(chunk, kind) if kind else chunk)
        if kind == "malformed" and first_delta:
            payload = malformed(payload)
        await resp.write(b"data: " + payload + b"\n\n")

    try:
        if parsed.chat:
            for renderer in renderers:  # one role chunk per choice, as vLLM opens a chat stream of n choices
                await send(renderer.role_chunk())
        async with contextlib.aclosing(_arrivals(streams)) as arrivals:
            async for index, events in arrivals:
                deltas += 1
                stream = streams[index]
                chunk = renderers[index].delta_chunk(events, stream.cached_tokens)
                if parsed.x_batch_sizes and events[-1].finish_reason is not None:  # its stream's last chunk
                    _put_batch_sizes(chunk, stream.batch_sizes, len(streams) > 1)
                await send(chunk, first_delta=deltas == 1)
                if kind == "reset":
                    assert request.transport is not None
                    request.transport.abort()  # mid-stream: the client has headers and one chunk, then a reset
                    return resp
    except EngineDead as dead:  # headers went out: the error rides in the stream, as vLLM's do; no [DONE]
        await resp.write(b"data: " + orjson.dumps(ApiError(503, str(dead)).body()) + b"\n\n")
        await resp.write_eof()
        return resp
    except ConnectionResetError:
        if kind is None:
            raise
        return resp  # the client hung up on a faulted stream (a malformed chunk): expected, not a server error
    if parsed.include_usage:
        usages = [(r, r.usage(s.cached_tokens)) for r, s in zip(renderers, streams, strict=True)]
        await send(renderers[0].usage_chunk(summed_usage(usages)))
    if kind != "no_done":
        await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=True)


async def _render(request: web.Request, chat: bool) -> web.Response:
    """vLLM's render routes: the prompt's token ids and sampling, in ``GenerateRequest``'s fields; nothing runs.
    Completions answer a list, one entry per prompt (ids ``<id>-<i>`` when there are several, as vLLM names a
    prompt list's engine requests); chat one object."""
    sched = request.app[RUNNER_KEY].scheduler
    try:
        parsed = parse_request(await _read_json(request), chat, sched.tokenizer, sched.model.w.config.max_model_len)
    except ApiError as err:
        return _error(err)
    rendered = generate_requests(parsed, _response_id(request, parsed))
    return web.Response(body=orjson.dumps(rendered[0] if chat else rendered), content_type="application/json")


async def render_completion(request: web.Request) -> web.Response:
    return await _render(request, chat=False)


async def render_chat(request: web.Request) -> web.Response:
    return await _render(request, chat=True)


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


async def health(request: web.Request) -> web.Response:
    """200 while the engine thread runs; 503 and the reason once it died (it answers nothing more)."""
    failure = request.app[RUNNER_KEY].failure
    return web.Response(status=200) if failure is None else _error(ApiError(503, failure))


async def version(_: web.Request) -> web.Response:
    return _json({"version": _version()})


async def server_info(request: web.Request) -> web.Response:
    """vLLM's dev-mode ``/server_info?config_format=json``, in its shape, with the settings this engine has."""
    served = request.app[SERVED_KEY]
    return _json(
        {
            "vllm_config": {
                "cache_config": {"enable_prefix_caching": served.prefix_caching, "block_size": BLOCK_TOKENS},
                "scheduler_config": {"max_num_seqs": served.max_num_seqs},
                "model_config": {"enforce_eager": True, "dtype": "bfloat16"},
            },
            "vllm_env": {"VLLM_BATCH_INVARIANT": served.batch_invariant},
        }
    )


async def metrics(request: web.Request) -> web.Response:
    served = request.app[SERVED_KEY]
    info = cache_config_info(served.prefix_caching, served.num_gpu_blocks, served.kv_offloading_size)
    body = render(request.app[RUNNER_KEY].gauges) + info
    extra = request.app.get(METRICS_KEY)  # the fault counters, with --fault-* flags only
    if extra is not None:
        body += generate_latest(extra)
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


async def reset_prefix_cache(request: web.Request) -> web.Response:
    """vLLM 0.26's route and answer: 200 with ``{"success": false}`` when running requests keep the cache. It drops
    the prefix cache only; ``?reset_external=true`` empties the offload tier too."""
    if (failure := request.app[RUNNER_KEY].failure) is not None:
        return _error(ApiError(503, failure))
    try:
        external = query_flag(request.query.get("reset_external"), "reset_external")
    except ApiError as err:
        return _error(err)
    dropped = await asyncio.wrap_future(request.app[RUNNER_KEY].reset_prefix_cache(external))
    return _json({"success": dropped})


def build_app(
    runner: EngineRunner,
    faults: FaultPlan | None = None,
    served: Served | None = None,
    roles: pd.PDConfig | None = None,
    bind_host: str = "127.0.0.1",
) -> web.Application:
    """``faults``: the ``--fault-*`` plan; None or an inactive plan leaves every answer untouched.
    ``served``: the settings the engine reports about itself (defaults: EngineOptions' defaults).
    ``roles``: the server's prefill/decode role and side channel (default: ``--role both``).
    ``bind_host``: the address it listens on; on a loopback one it answers loopback host names only."""
    app = web.Application(middlewares=[guard, errors_as_json], client_max_size=4 * 1024 * 1024)
    app[BIND_HOST_KEY] = bind_host
    app[RUNNER_KEY] = runner
    app[SERVED_KEY] = served or Served()
    if faults is not None and faults.active:
        app[FAULTS_KEY] = faults
        app[FAULT_COUNTERS_KEY] = FaultCounters()
        app[METRICS_KEY] = CollectorRegistry(auto_describe=False)
        app[METRICS_KEY].register(app[FAULT_COUNTERS_KEY])
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions/render", render_completion)
    app.router.add_post("/v1/chat/completions/render", render_chat)
    pd.install(app, roles or pd.PDConfig(batch_invariant=app[SERVED_KEY].batch_invariant))
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/reset_prefix_cache", reset_prefix_cache)
    app.router.add_get("/server_info", server_info)
    return app
