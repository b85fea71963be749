"""An OpenAI-style server whose answer depends on how many requests it is serving when a request arrives.

Run as ``python -m tests.loadgen.concurrency_server --dialect {legacy,chat,llamacpp,sglang} [--token-s S]``; prints
``READY http://127.0.0.1:PORT``. It is the adversary of the level tests: the class of endpoint whose
batch-dependence a mislabelled canary hides.

The rule: a request that arrives while ``n`` requests are being served (itself included) gets
``max_tokens`` tokens, token ``i`` being id ``1000 + i``, except that for ``n >= 2`` the token at
position ``n - 1`` is ``5000 + n``. So the answer alone (n = 1) is the reference, and an answer that
shared the server with ``k`` other requests first differs from it at position ``k``. Every request
generates exactly ``max_tokens`` tokens (no early stop), one per ``--token-s`` seconds, streamed or not.

Dialects of the answer's logprobs: ``legacy`` (completions: ``tokens`` / ``token_logprobs`` /
``top_logprobs`` dicts, ids in ``choices[].token_ids``), ``chat`` (chat completions: ``content[]``
entries, ids in ``choices[].token_ids``), ``llamacpp`` (completions with llama.cpp's ``content[]``
entries carrying each token's ``id``; no ``token_ids``), ``sglang`` (SGLang 0.5.15's shapes: ``/generate``
answers ``output_ids`` and ``meta_info`` with ``[logprob, id, text]`` entries, a stream's chunks cumulative
(the whole text and ids so far in every chunk, as captured from it in
``tests/loadgen/core/wire/fixtures/sglang-0.5.15/``), or only the new ids and entries with ``--incremental``;
the last answer's ``meta_info`` carries SGLang's own wall-clock times (``request_received_ts``,
``request_finished_ts``: the engine finished, whenever the client reads it); its
``/v1/completions`` sends token strings and no ids). In the ``sglang`` dialect a token's text depends only
on its position, so distinct ids share a string: compared by strings, the divergence is invisible.

``GET /metrics``: ``vllm:num_requests_running`` (requests being served) in Prometheus text.
``GET /_arrivals``: every request's ``{"prompt", "n", "t"}`` at arrival, in arrival order, its ``"request_id"``
(the ``X-Request-Id`` header) and ``"rid"`` (the body's, as SGLang's ``/generate`` takes it), and ``"end"``,
when the server wrote its last byte (null while it runs). ``/generate`` with a ``text`` list (unstreamed)
answers a list, one answer per prompt, as SGLang answers a batch.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from aiohttp import web

from tests.loadgen.common_routes import end_stream, models, running_gauge
from tests.loadgen.serve_app import run, serve

STATE: dict[str, Any] = {"inflight": 0, "arrivals": [], "dialect": "legacy", "token_s": 0.01, "incremental": False}


def token_ids(n: int, max_tokens: int) -> list[int]:
    ids = [1000 + i for i in range(max_tokens)]
    if n >= 2 and n - 1 < max_tokens:
        ids[n - 1] = 5000 + n
    return ids


def _text(tid: int) -> str:
    return f" t{tid}"


def _sglang_text(position: int) -> str:
    return f" w{position}"  # the same string for whatever id sits at this position


def _logprobs(ids: list[int], dialect: str, start: int = 0) -> dict[str, Any]:
    if dialect == "sglang":  # SGLang's OpenAI route: legacy shape, strings only
        texts = [_sglang_text(start + i) for i in range(len(ids))]
        return {
            "tokens": texts,
            "token_logprobs": [-0.25 for _ in ids],
            "top_logprobs": [{t: -0.25, t + "x": -1.5} for t in texts],
            "text_offset": [0 for _ in ids],
        }
    if dialect == "legacy":
        return {
            "tokens": [_text(t) for t in ids],
            "token_logprobs": [-0.25 for _ in ids],
            "top_logprobs": [{_text(t): -0.25, _text(t + 1): -1.5} for t in ids],
            "text_offset": [0 for _ in ids],
        }
    entries = []
    for t in ids:
        entry: dict[str, Any] = {"token": _text(t), "logprob": -0.25}
        alts = [{"token": _text(t), "logprob": -0.25}, {"token": _text(t + 1), "logprob": -1.5}]
        if dialect == "llamacpp":
            entry["id"] = t
            alts[0]["id"], alts[1]["id"] = t, t + 1
        entry["top_logprobs"] = alts
        entries.append(entry)
    return {"content": entries}


def _choice(
    ids: list[int], *, chat: bool, stream: bool, finish: str | None, body: dict[str, Any], start: int = 0
) -> dict[str, Any]:
    dialect = STATE["dialect"]
    if dialect == "sglang":
        text = "".join(_sglang_text(start + i) for i in range(len(ids)))
    else:
        text = "".join(_text(t) for t in ids)
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
    if chat:
        choice["delta" if stream else "message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    if body.get("logprobs"):
        choice["logprobs"] = _logprobs(ids, dialect, start)
    if body.get("return_token_ids") and dialect not in ("llamacpp", "sglang"):
        choice["token_ids"] = ids
    return choice


async def server_info(_: web.Request) -> web.Response:
    """SGLang 0.5.15's ``/server_info`` (``/get_server_info``): its server arguments and its version (it has
    no ``/version``); a few of the arguments, as SGLang names them."""
    args = {"disable_radix_cache": False, "page_size": 1, "enable_deterministic_inference": False}
    return web.json_response({**args, "attention_backend": "triton", "version": "0.5.15"})


async def arrivals(_: web.Request) -> web.Response:
    return web.json_response(STATE["arrivals"])


def _prompt(body: dict[str, Any]) -> str:
    if "messages" in body:
        return str(body["messages"][-1].get("content", ""))
    return str(body.get("prompt", body.get("text", "")))


async def generate(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    STATE["inflight"] += 1
    n = STATE["inflight"]
    arrival: dict[str, Any] = {"prompt": _prompt(body)[:40], "n": n, "t": time.time(), "end": None}
    arrival.update(request_id=request.headers.get("X-Request-Id"), rid=body.get("rid"))
    STATE["arrivals"].append(arrival)
    try:
        if request.path == "/generate":
            return await _native(request, body, token_ids(n, int(body["sampling_params"]["max_new_tokens"])))
        return await _answer(request, body, token_ids(n, int(body["max_tokens"])))
    finally:
        STATE["inflight"] -= 1
        arrival["end"] = time.time()


def _native_object(
    body: dict[str, Any], ids: list[int], start: int, done: bool, total: int, received: float
) -> dict[str, Any]:
    """One /generate answer: ``ids`` are positions ``start..``; ``total`` tokens so far."""
    meta: dict[str, Any] = {
        "id": "r",
        "finish_reason": {"type": "length", "length": total} if done else None,
        "prompt_tokens": 8,
        "weight_version": "default",
        "completion_tokens": total,
        "cached_tokens": 0,
    }
    if done:  # with --enable-metrics, SGLang's own times (seconds since the epoch)
        meta.update(request_received_ts=received, request_finished_ts=time.time())
    if body.get("return_logprob"):
        entries = [[-0.25, t, _sglang_text(start + i)] for i, t in enumerate(ids)]
        meta["output_token_logprobs"] = entries
        if body.get("top_logprobs_num"):
            meta["output_top_logprobs"] = [
                [[-0.25, t, _sglang_text(start + i)], [-1.5, t + 1, _sglang_text(start + i) + "x"]]
                for i, t in enumerate(ids)
            ]
    text = "".join(_sglang_text(start + i) for i in range(len(ids)))
    return {"text": text, "output_ids": ids, "meta_info": meta}


async def _native(request: web.Request, body: dict[str, Any], ids: list[int]) -> web.StreamResponse:
    step = STATE["token_s"]
    received = time.time()
    if isinstance(body["text"], list):  # a batch, unstreamed: one answer per prompt, in prompt order
        await asyncio.sleep(step * len(ids))
        return web.json_response([_native_object(body, ids, 0, True, len(ids), received) for _ in body["text"]])
    if not body.get("stream"):
        await asyncio.sleep(step * len(ids))
        return web.json_response(_native_object(body, ids, 0, True, len(ids), received))
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for i in range(len(ids)):
        await asyncio.sleep(step)
        done = i == len(ids) - 1
        if STATE["incremental"]:
            obj = _native_object(body, ids[i : i + 1], i, done, i + 1, received)
        else:
            obj = _native_object(body, ids[: i + 1], 0, done, i + 1, received)
        await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def _answer(request: web.Request, body: dict[str, Any], ids: list[int]) -> web.StreamResponse:
    chat = request.path.endswith("/chat/completions")
    obj = "chat.completion" if chat else "text_completion"
    usage = {"prompt_tokens": 8, "completion_tokens": len(ids), "total_tokens": 8 + len(ids)}
    step = STATE["token_s"]
    if not body.get("stream"):
        await asyncio.sleep(step * len(ids))
        choice = _choice(ids, chat=chat, stream=False, finish="length", body=body)
        return web.json_response({"id": "x", "object": obj, "model": "m", "choices": [choice], "usage": usage})
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for i, tid in enumerate(ids):
        await asyncio.sleep(step)
        finish = "length" if i == len(ids) - 1 else None
        chunk: dict[str, Any] = {"id": "x", "object": obj + ".chunk", "model": "m"}
        chunk["choices"] = [_choice([tid], chat=chat, stream=True, finish=finish, body=body, start=i)]
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    return await end_stream(resp, body, obj, usage)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dialect", choices=("legacy", "chat", "llamacpp", "sglang"), default="legacy")
    parser.add_argument("--token-s", type=float, default=0.01)
    parser.add_argument("--incremental", action="store_true", help="sglang: streamed chunks carry only new tokens")
    args = parser.parse_args()
    STATE["dialect"], STATE["token_s"], STATE["incremental"] = args.dialect, args.token_s, args.incremental
    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", running_gauge(STATE))
    app.router.add_get("/_arrivals", arrivals)
    app.router.add_post("/v1/completions", generate)
    app.router.add_post("/v1/chat/completions", generate)
    app.router.add_post("/generate", generate)
    if args.dialect == "sglang":
        app.router.add_get("/server_info", server_info)
        app.router.add_get("/get_server_info", server_info)
    await serve(app)


if __name__ == "__main__":
    run(main)
