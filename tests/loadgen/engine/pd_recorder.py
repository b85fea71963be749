"""A recording stand-in for one vLLM server behind vllm-router in PD mode: logs every request, answers plausibly.

Run as ``python pd_recorder.py --role prefill|decode --log FILE``; prints ``READY http://127.0.0.1:PORT``. Every
request (method, path, query, headers, JSON body) is appended to FILE as one JSON line, flushed, before it is
answered. Answers have vLLM's shapes: ``/health`` 200, ``/metrics`` two vLLM gauges, ``/v1/models`` one model,
``/v1/completions/render`` and ``/v1/chat/completions/render`` the token ids of the prompt (one id per word),
and ``/v1/completions`` / ``/v1/chat/completions`` a fixed three-token completion, streamed or not, with
``token_ids`` and logprobs when asked. A prefill recorder asked with ``kv_transfer_params.do_remote_decode``
answers one token and the ``kv_transfer_params`` a vLLM NixlConnector prefiller returns (``request_finished``:
``do_remote_prefill``, ``do_remote_decode``, ``remote_block_ids``, ``remote_engine_id``, ``remote_request_id``,
``remote_host``, ``remote_port``, ``tp_size``). A prompt holding ``prefill-status:NNN`` (or
``decode-status:NNN``) is answered by that server with that status and vLLM's error body; ``--no-render``
answers 404 on the render routes (a vLLM without them). Usage reports ``cached_tokens`` 16 on the prefill
recorder and 99 on the decode one, to show whose the router passes on. The ``remote_port`` it names is its
own, where ``GET /kv/{id}`` answers bytes that are no KV cache (after 30 s when the id holds ``slow``): a
prefill server gone wrong, for the decode server's fault tests. Used by ``capture_pd.py`` to write the fixtures under
``fixtures/vllm-router-0.1.17/``; it computes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

from aiohttp import web

MODEL = "recorded-model"
TOKENS = [(" alpha", 1001, -0.125), (" beta", 1002, -0.25), (" gamma", 1003, -0.5)]
METRICS = (
    "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
    "# TYPE vllm:num_requests_running gauge\n"
    f'vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} 0.0\n'
    "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
    "# TYPE vllm:num_requests_waiting gauge\n"
    f'vllm:num_requests_waiting{{engine="0",model_name="{MODEL}"}} 0.0\n'
)


class Recorder:
    def __init__(self, role: str, log: Path, render: bool) -> None:
        self.role = role
        self.render = render
        self.log = log.open("a", encoding="utf-8")
        self.port = 0
        self.count = 0

    def record(self, request: web.Request, body: object) -> None:
        entry = {
            "t": round(time.time(), 3),
            "role": self.role,
            "method": request.method,
            "path": request.path,
            "query": dict(request.query),
            "headers": dict(request.headers),
            "body": body,
        }
        self.log.write(json.dumps(entry) + "\n")
        self.log.flush()


RECORDER = web.AppKey("recorder", Recorder)


def _prompt_ids(body: dict[str, Any]) -> list[int]:
    if "messages" in body:
        text = " ".join(str(m.get("content", "")) for m in body["messages"] if isinstance(m, dict))
    else:
        text = str(body.get("prompt", ""))
    return [100 + (sum(map(ord, word)) % 900) for word in text.split()] or [100]


def _status(body: dict[str, Any], role: str) -> int | None:
    text = json.dumps(body.get("messages") or body.get("prompt"))
    mark = f"{role}-status:"
    at = text.find(mark)
    return int(text[at + len(mark) : at + len(mark) + 3]) if at >= 0 else None


def _choice(body: dict[str, Any], tokens: list[tuple[str, int, float]], chat: bool, stream: bool) -> dict[str, Any]:
    text = "".join(t for t, _, _ in tokens)
    choice: dict[str, Any] = {"index": 0, "finish_reason": None, "stop_reason": None}
    wants_lp = body.get("logprobs") not in (None, False)
    if chat:
        if stream:
            choice["delta"] = {"content": text}
        else:
            choice["message"] = {"role": "assistant", "content": text}
        entries = [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []} for t, _, lp in tokens]
        choice["logprobs"] = {"content": entries} if wants_lp else None
    else:
        choice["text"] = text
        choice["logprobs"] = (
            {
                "text_offset": [0] * len(tokens),
                "token_logprobs": [lp for _, _, lp in tokens],
                "tokens": [t for t, _, _ in tokens],
                "top_logprobs": [{t: lp} for t, _, lp in tokens],
            }
            if wants_lp
            else None
        )
    if body.get("return_token_ids"):
        choice["token_ids"] = [i for _, i, _ in tokens]
    return choice


def _kv_params(rec: Recorder, request_id: str, n_prompt: int) -> dict[str, Any]:
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": list(range(1, 1 + -(-n_prompt // 16))),
        "remote_engine_id": f"recorder-{rec.role}",
        "remote_request_id": request_id,
        "remote_host": "127.0.0.1",
        "remote_port": rec.port,
        "tp_size": 1,
    }


async def _generate(request: web.Request, chat: bool) -> web.StreamResponse:
    rec = request.app[RECORDER]
    body = await request.json()
    rec.record(request, body)
    rec.count += 1
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{rec.role}-{rec.count}"
    status = _status(body, rec.role)
    if status is not None:
        error = {"message": f"recorded {rec.role} failure", "type": "InternalServerError", "param": None}
        return web.json_response({"error": error | {"code": status}}, status=status)
    prompt_ids = _prompt_ids(body)
    kv_in = body.get("kv_transfer_params") or {}
    prefilling = bool(kv_in.get("do_remote_decode"))
    tokens = TOKENS[: max(1, min(int(body.get("max_tokens") or 3), 3))]
    usage: dict[str, Any] = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(tokens)}
    usage["total_tokens"] = len(prompt_ids) + len(tokens)
    usage["prompt_tokens_details"] = {"cached_tokens": 16 if rec.role == "prefill" else 99}
    obj = "chat.completion" if chat else "text_completion"
    if not body.get("stream"):
        choice = _choice(body, tokens, chat, stream=False)
        choice["finish_reason"] = "length"
        answer: dict[str, Any] = {"id": rid, "object": obj, "created": int(time.time()), "model": MODEL}
        answer |= {"choices": [choice], "usage": usage}
        answer["kv_transfer_params"] = _kv_params(rec, rid, len(prompt_ids)) if prefilling else None
        if body.get("return_token_ids"):
            answer["prompt_token_ids"] = prompt_ids
        return web.json_response(answer)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    obj = "chat.completion.chunk" if chat else "text_completion"
    for i, token in enumerate(tokens):
        choice = _choice(body, [token], chat, stream=True)
        if i == len(tokens) - 1:
            choice["finish_reason"] = "length"
        chunk = {"id": rid, "object": obj, "created": int(time.time()), "model": MODEL, "choices": [choice]}
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await asyncio.sleep(0.01)
    if (body.get("stream_options") or {}).get("include_usage"):
        chunk = {"id": rid, "object": obj, "created": int(time.time()), "model": MODEL, "choices": [], "usage": usage}
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=False)


async def chat(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=True)


async def render_prompt(request: web.Request) -> web.Response:
    """vLLM's ``/v1/completions/render`` answer: a list of rendered prompts (token ids, sampling params)."""
    body = await request.json()
    rec = request.app[RECORDER]
    rec.record(request, body)
    if not rec.render:
        return web.json_response({"error": {"message": "Not Found", "code": 404}}, status=404)
    ids = _prompt_ids(body)
    if request.path.startswith("/v1/chat/"):
        return web.json_response({"token_ids": ids, "request_id": "chatcmpl-render"})
    return web.json_response([{"token_ids": ids, "sampling_params": {}, "model": MODEL, "request_id": "cmpl-render"}])


async def garbage_kv(request: web.Request) -> web.Response:
    request.app[RECORDER].record(request, None)
    if "slow" in request.match_info["transfer_id"]:
        await asyncio.sleep(30)
    return web.Response(body=b"garbage, not a KV cache", content_type="application/octet-stream")


async def other(request: web.Request) -> web.Response:
    raw = await request.read()
    try:
        body: object = json.loads(raw) if raw else None
    except ValueError:
        body = raw.decode(errors="replace")
    request.app[RECORDER].record(request, body)
    if request.path == "/health":
        return web.Response(status=200)
    if request.path == "/metrics":
        return web.Response(text=METRICS, content_type="text/plain")
    if request.path == "/v1/models":
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "rec"}]})
    return web.json_response({"error": {"message": f"not recorded: {request.path}", "code": 404}}, status=404)


async def main(role: str, log: Path, render: bool) -> None:
    rec = Recorder(role, log, render)
    app = web.Application()
    app[RECORDER] = rec
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions/render", render_prompt)
    app.router.add_post("/v1/chat/completions/render", render_prompt)
    app.router.add_get("/kv/{transfer_id}", garbage_kv)
    app.router.add_route("*", "/{tail:.*}", other)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    rec.port = runner.addresses[0][1]
    print(f"READY http://127.0.0.1:{rec.port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=["prefill", "decode"], required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--no-render", action="store_true", help="answer 404 on the render routes")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(args.role, args.log, not args.no_render))
