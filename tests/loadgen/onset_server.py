"""An OpenAI-style completions server whose answer changes once more than K requests share it: an onset known
by construction, for ``loadgen onset``'s tests.

Run as ``python -m tests.loadgen.onset_server --diverge-above K [--token-s S] [--first-piece N]``; prints
``READY http://127.0.0.1:PORT``. ``--first-piece N``: a stream's first N token events are written together, in
one write after the Nth token, as an engine that streams at an interval does, or as a client that read late
sees them (the hand-over tests' adversary: a pace taken from that piece would look N times too fast).

The rule: every request gets ``max_tokens`` tokens, token ``i`` being id ``1000 + i``, one per ``--token-s``
seconds (streamed or not), except that the last token is id ``5000`` when the requests the server was
serving (the request itself included), counted at its arrival and before each of its tokens, were more
than K for most of its life (the lower median of those counts). A canary sent at level L (L background
requests held, docs/design.md "Words") shares the server with L others for its life (the level is a floor,
save a moment with one fewer where a starved client starts a successor late), one more while a background
request hands over to its successor (a few tokens, on a loaded machine sometimes longer). Its median count
is then L + 1, so it diverges exactly when L + 1 > K: the onset level is K. The median, rather than the count at
arrival or the fewest, keeps a hand-over's extra request, shorter than half a canary's life, from making level
K - 1 diverge.

``GET /v1/models``; ``GET /metrics``: ``vllm:num_requests_running`` in Prometheus text; ``GET /_seen``:
per request, in arrival order, ``{"prompt", "fewest", "median", "most"}`` of its counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from typing import Any

from aiohttp import web

from tests.loadgen.common_routes import end_stream, legacy_choice, models, running_gauge
from tests.loadgen.serve_app import run, serve

STATE: dict[str, Any] = {"inflight": 0, "seen": [], "k": 1, "token_s": 0.01, "first_piece": 1}


async def seen(_: web.Request) -> web.Response:
    return web.json_response([{k: v for k, v in e.items() if k != "counts"} for e in STATE["seen"]])


async def generate(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    STATE["inflight"] += 1
    entry: dict[str, Any] = {"prompt": str(body.get("prompt", ""))[:40], "counts": [STATE["inflight"]]}
    STATE["seen"].append(entry)
    try:
        return await _answer(request, body, entry)
    finally:
        STATE["inflight"] -= 1


async def _token(i: int, last: int, entry: dict[str, Any]) -> int:
    """Token ``i`` after one step; the last one is decided by the median count over the whole life."""
    await asyncio.sleep(STATE["token_s"])
    counts = entry["counts"]
    counts.append(STATE["inflight"])
    if i < last:
        return 1000 + i
    entry.update(fewest=min(counts), median=statistics.median_low(counts), most=max(counts))
    return 5000 if entry["median"] > STATE["k"] else 1000 + i


async def _answer(request: web.Request, body: dict[str, Any], entry: dict[str, Any]) -> web.StreamResponse:
    n = int(body["max_tokens"])
    usage = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
    if not body.get("stream"):
        ids = [await _token(i, n - 1, entry) for i in range(n)]
        choice = legacy_choice(ids, body, "length")
        return web.json_response(
            {"id": "x", "object": "text_completion", "model": "m", "choices": [choice], "usage": usage}
        )
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    piece = b""
    for i in range(n):
        tid = await _token(i, n - 1, entry)
        chunk: dict[str, Any] = {"id": "x", "object": "text_completion.chunk", "model": "m"}
        chunk["choices"] = [legacy_choice([tid], body, "length" if i == n - 1 else None)]
        piece += b"data: " + json.dumps(chunk).encode() + b"\n\n"
        if i + 1 >= min(STATE["first_piece"], n):
            await resp.write(piece)
            piece = b""
    return await end_stream(resp, body, "text_completion", usage)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--diverge-above", type=int, required=True, metavar="K")
    parser.add_argument("--token-s", type=float, default=0.01)
    parser.add_argument("--first-piece", type=int, default=1, metavar="N")
    args = parser.parse_args()
    STATE["k"], STATE["token_s"], STATE["first_piece"] = args.diverge_above, args.token_s, args.first_piece
    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", running_gauge(STATE))
    app.router.add_get("/_seen", seen)
    app.router.add_post("/v1/completions", generate)
    await serve(app)


if __name__ == "__main__":
    run(main)
