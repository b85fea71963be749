"""An OpenAI-style completions server whose answer time does not grow with the answer's length, for the tests of
the level's ceiling and of background the endpoint refuses.

Run as ``python level_server.py [--delay-s S]``; prints ``READY http://127.0.0.1:PORT``. Every completion is
answered ``S`` seconds (default 0.2) after it arrived, whatever its ``max_tokens``, as a hosted API, a buffering
proxy or a fixed-delay mock answers: a streamed request gets all its events (``max_tokens`` tokens, usage where
asked, ``[DONE]``) in one write, so its first and last token arrive together; a non-streamed one the whole JSON.
Under ``/refuse`` a request without ``logprobs`` (background traffic: the probe and the canaries ask for them)
is refused at once with HTTP 400 and an OpenAI-style JSON error, as an engine refuses a prompt longer than its
context.

The server counts the requests it serves: one is in flight from its arrival until its answer is ready, taken
off the count before the first byte of the answer is written, so the count never lags the client's own.
``GET /_seen``: per request with ``logprobs`` (the canaries), in arrival order, ``{"prompt", "at_arrival",
"fewest", "most"}``: the other requests in flight when it arrived, and the fewest and most over its life.
``GET /_background``: the arrival times (epoch seconds) of the requests without ``logprobs``, and
``most``: the most of them ever in flight at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from aiohttp import web
from common_routes import models
from serve_app import run, serve

STATE: dict[str, Any] = {"delay_s": 0.2, "inflight": 0, "background": 0, "most_background": 0}
LIVE: list[dict[str, Any]] = []  # the canaries in flight: their counts move with every arrival and end
SEEN: list[dict[str, Any]] = []
BACKGROUND_ARRIVALS: list[float] = []
REFUSAL = (
    "This model's maximum context length is 16 tokens. However, you requested 40 tokens (32 in the messages, "
    "8 in the completion). Please reduce the length of the messages or completion."
)


def _moved() -> None:
    """The count changed: every canary in flight sees it."""
    for entry in LIVE:
        others = STATE["inflight"] - 1
        entry["fewest"], entry["most"] = min(entry["fewest"], others), max(entry["most"], others)


def _arrive(canary: bool, prompt: str) -> dict[str, Any] | None:
    STATE["inflight"] += 1
    entry = None
    if canary:
        others = STATE["inflight"] - 1
        entry = {"prompt": prompt[:40], "at_arrival": others, "fewest": others, "most": others}
        SEEN.append(entry)
    else:
        STATE["background"] += 1
        STATE["most_background"] = max(STATE["most_background"], STATE["background"])
        BACKGROUND_ARRIVALS.append(time.time())
    _moved()
    if entry is not None:
        LIVE.append(entry)
    return entry


def _leave(entry: dict[str, Any] | None) -> None:
    if entry is not None:
        LIVE.remove(entry)
    else:
        STATE["background"] -= 1
    STATE["inflight"] -= 1
    _moved()


def _choice(ids: list[int], body: dict[str, Any], *, finish: str | None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "text": "".join(f" t{t}" for t in ids), "finish_reason": finish}
    if body.get("logprobs"):
        choice["logprobs"] = {
            "tokens": [f" t{t}" for t in ids],
            "token_logprobs": [-0.25 for _ in ids],
            "top_logprobs": [{f" t{t}": -0.25, f" t{t + 1}": -1.5} for t in ids],
            "text_offset": [0 for _ in ids],
        }
    if body.get("return_token_ids"):
        choice["token_ids"] = ids
    return choice


def _stream(ids: list[int], body: dict[str, Any], usage: dict[str, int]) -> bytes:
    """Every event of a streamed answer, to be written at once."""
    events = []
    for i, tid in enumerate(ids):
        finish = "length" if i == len(ids) - 1 else None
        chunk = {"id": "x", "object": "text_completion.chunk", "model": "m"}
        chunk["choices"] = [_choice([tid], body, finish=finish)]
        events.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    if (body.get("stream_options") or {}).get("include_usage"):
        final = {"id": "x", "object": "text_completion.chunk", "model": "m", "choices": [], "usage": usage}
        events.append(b"data: " + json.dumps(final).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return b"".join(events)


async def completions(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    canary = bool(body.get("logprobs"))
    if request.path.startswith("/refuse/") and not canary:
        BACKGROUND_ARRIVALS.append(time.time())
        error = {"message": REFUSAL, "type": "BadRequestError", "param": None, "code": 400}
        return web.json_response({"object": "error", "error": error}, status=400)
    entry = _arrive(canary, str(body.get("prompt", "")))
    try:
        await asyncio.sleep(STATE["delay_s"])
    finally:
        _leave(entry)  # the answer is ready: off the count before its first byte goes out
    n = int(body["max_tokens"])
    ids = [1000 + i for i in range(n)]
    usage = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
    if not body.get("stream"):
        choice = _choice(ids, body, finish="length")
        return web.json_response(
            {"id": "x", "object": "text_completion", "model": "m", "choices": [choice], "usage": usage}
        )
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(_stream(ids, body, usage))
    await resp.write_eof()
    return resp


async def seen(_: web.Request) -> web.Response:
    return web.json_response(SEEN)


async def background(_: web.Request) -> web.Response:
    return web.json_response({"arrivals": BACKGROUND_ARRIVALS, "most": STATE["most_background"]})


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay-s", type=float, default=0.2)
    args = parser.parse_args()
    STATE["delay_s"] = args.delay_s
    app = web.Application()
    for prefix in ("", "/refuse"):
        app.router.add_get(f"{prefix}/v1/models", models)
        app.router.add_post(f"{prefix}/v1/completions", completions)
    app.router.add_get("/_seen", seen)
    app.router.add_get("/_background", background)
    await serve(app)


if __name__ == "__main__":
    run(main)
