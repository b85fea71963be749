"""An OpenAI-style completions server of one timing class, logging what it served beside every request.

Run as ``python -m tests.loadgen.timing_server --timing CLASS [--delay-s S] [--delay-max-s S] [--token-s S] [--seed N]
[--diverge-at K] [--metrics]``; prints ``READY http://127.0.0.1:PORT``. It is the adversary of the level's band
(loadgen/core/band.py, docs/design.md "Words": level): how the background can keep a slot busy depends on what
the endpoint lets the client see of a request's progress, so each class is one way an endpoint shows it:

- ``whole-fixed``: a streamed answer's every SSE event is written at once, ``--delay-s`` after arrival, whatever
  ``max_tokens`` is (a buffering proxy in front of an engine, a hosted API that streams in large chunks); a
  non-streamed answer comes after the same delay;
- ``whole-random``: the same with a seeded delay per request, uniform in ``[--delay-s, --delay-max-s]``, drawn in
  arrival order (answer times that jump);
- ``tokens``: token-by-token streams, one token per ``--token-s`` (the time grows with the length); a
  non-streamed answer comes after ``max_tokens`` tokens' time;
- ``plain``: non-streamed answers only, after ``--delay-s`` whatever the length; a streamed request is refused
  (HTTP 400), so a scenario that streams by mistake fails loudly instead of testing another class.

Under ``/refuse`` (``{url}/refuse/v1/completions``) a request without ``logprobs`` (background traffic: the probe
and the canaries ask for them) is refused at once with HTTP 400 and an OpenAI-style JSON error, as an engine
refuses a prompt longer than its context.

Answers: the legacy completions dialect (``choices[].logprobs`` with ``tokens`` / ``token_logprobs`` /
``top_logprobs``, ids in ``choices[].token_ids``), ``max_tokens`` tokens, token ``i`` being id ``1000 + i``. With
``--diverge-at K`` (K > 0) the last token is id ``5000`` when the request's time-weighted median of OTHER requests
in flight beside it, over its life so far when that token is decided (the end for the whole classes, the last
token for ``tokens``), was at least K: a request that shared the server with K others for most of its life
diverges, one that met K others for a moment (a hand-over) does not. K = 0: never.

``GET /_log``: every request in arrival order, ``{"tag", "stream", "status", "arrival", "end", "others_at_arrival",
"others_seconds", "others_min", "others_median", "others_max", "diverged"}``: ``tag`` the prompt's first 40
characters (canary and background told apart), ``status`` 200, or 400 where refused, times in epoch seconds at
the server (``end``: its last byte written, null while it runs), ``others_seconds`` the seconds of its life spent
beside each count of other requests (``{"3": 0.21, "4": 0.04}``), min / median (time-weighted, lower) / max of
that count. No ``/metrics`` unless ``--metrics``: ``vllm:num_requests_running``, the requests in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import random
import time
from typing import Any

from aiohttp import web

from tests.loadgen.common_routes import legacy_choice, models, running_gauge
from tests.loadgen.serve_app import run, serve

TIMINGS = ("whole-fixed", "whole-random", "tokens", "plain")
STATE: dict[str, Any] = {"inflight": 0}  # the gauge's state (common_routes.running_gauge)
LOG: list[dict[str, Any]] = []
CONTEXT_REFUSAL = (
    "This model's maximum context length is 16 tokens. However, you requested 40 tokens (32 in the messages, "
    "8 in the completion). Please reduce the length of the messages or completion."
)


class Occupancy:
    """The count of requests in flight as a step function of time: ``counts[i]`` from ``times[i]`` on."""

    def __init__(self) -> None:
        self.times: list[float] = [0.0]
        self.counts: list[int] = [0]

    def change(self, delta: int, now: float) -> None:
        self.times.append(now)
        self.counts.append(self.counts[-1] + delta)

    def others_seconds(self, start: float, end: float) -> dict[int, float]:
        """Seconds of ``[start, end]`` spent at each count of OTHER requests (the count minus the request
        itself, which is in flight over the whole span)."""
        out: dict[int, float] = {}
        i = bisect.bisect_right(self.times, start) - 1
        while i < len(self.times) and self.times[i] < end:
            lo = max(self.times[i], start)
            hi = min(self.times[i + 1], end) if i + 1 < len(self.times) else end
            if hi > lo:
                others = max(self.counts[i] - 1, 0)
                out[others] = out.get(others, 0.0) + hi - lo
            i += 1
        return out


def lower_median(seconds: dict[int, float]) -> int | None:
    """The smallest count at which half the time or more has been spent at it or below."""
    total = sum(seconds.values())
    if total <= 0:
        return None
    cumulative = 0.0
    for count in sorted(seconds):
        cumulative += seconds[count]
        if cumulative >= total / 2:
            return count
    return max(seconds)


class Server:
    """One timing class's answers; the log and the occupancy they are decided from."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.timing: str = args.timing
        self.delay_s: float = args.delay_s
        self.delay_max_s: float = max(args.delay_max_s, args.delay_s)
        self.token_s: float = args.token_s
        self.diverge_at: int = args.diverge_at
        self.rng = random.Random(args.seed)
        self.occupancy = Occupancy()

    def delay(self) -> float:
        if self.timing == "whole-random":
            return self.rng.uniform(self.delay_s, self.delay_max_s)
        return self.delay_s

    def ids(self, n: int, entry: dict[str, Any]) -> list[int]:
        """The answer's ids, the last one decided now by the request's median others so far."""
        ids = [1000 + i for i in range(n)]
        median = lower_median(self.occupancy.others_seconds(entry["arrival"], time.time()))
        entry["diverged"] = bool(self.diverge_at > 0 and n > 0 and median is not None and median >= self.diverge_at)
        if entry["diverged"]:
            ids[-1] = 5000
        return ids

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        now = time.time()
        STATE["inflight"] += 1
        self.occupancy.change(+1, now)
        stream = bool(body.get("stream"))
        entry: dict[str, Any] = {
            "tag": str(body.get("prompt", ""))[:40],
            "stream": stream,
            "status": 200,
            "arrival": now,
            "end": None,
            "others_at_arrival": STATE["inflight"] - 1,
            "diverged": None,
        }
        LOG.append(entry)
        delay = self.delay()  # drawn in arrival order, whatever the answer's path
        try:
            refusal = _refusal(self.timing, request.path, body)
            if refusal is not None:
                entry["status"] = 400
                error = {"message": refusal, "type": "BadRequestError", "param": None, "code": 400}
                return web.json_response({"object": "error", "error": error}, status=400)
            if self.timing == "tokens":
                return await self._tokens(request, body, entry)
            return await self._whole(request, body, entry, delay)
        finally:
            end = time.time()
            STATE["inflight"] -= 1
            self.occupancy.change(-1, end)
            seconds = self.occupancy.others_seconds(entry["arrival"], end)
            entry.update(
                end=end,
                others_seconds={str(k): round(v, 6) for k, v in sorted(seconds.items())},
                others_min=min(seconds, default=None),
                others_median=lower_median(seconds),
                others_max=max(seconds, default=None),
            )

    async def _whole(
        self, request: web.Request, body: dict[str, Any], entry: dict[str, Any], delay: float
    ) -> web.StreamResponse:
        n = int(body.get("max_tokens") or 16)
        if not entry["stream"]:
            await asyncio.sleep(delay)
            return web.json_response(_object(self.ids(n, entry), body))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(delay)
        ids = self.ids(n, entry)
        events = [_chunk([tid], body, finish="length" if i == n - 1 else None) for i, tid in enumerate(ids)]
        await resp.write(b"".join(events) + _tail(body, n))  # every event in one write
        await resp.write_eof()
        return resp

    async def _tokens(self, request: web.Request, body: dict[str, Any], entry: dict[str, Any]) -> web.StreamResponse:
        n = int(body.get("max_tokens") or 16)
        if not entry["stream"]:
            await asyncio.sleep(self.token_s * n)
            return web.json_response(_object(self.ids(n, entry), body))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(n):
            await asyncio.sleep(self.token_s)
            tid = self.ids(n, entry)[-1] if i == n - 1 else 1000 + i
            await resp.write(_chunk([tid], body, finish="length" if i == n - 1 else None))
        await resp.write(_tail(body, n))
        await resp.write_eof()
        return resp


def _refusal(timing: str, path: str, body: dict[str, Any]) -> str | None:
    """Why the request is refused with HTTP 400, or None."""
    if timing == "plain" and body.get("stream"):
        return "this endpoint answers non-streamed requests only"
    if path.startswith("/refuse/") and not body.get("logprobs"):
        return CONTEXT_REFUSAL
    return None


def _usage(n: int) -> dict[str, int]:
    return {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}


def _object(ids: list[int], body: dict[str, Any]) -> dict[str, Any]:
    choice = legacy_choice(ids, body, "length")
    return {"id": "x", "object": "text_completion", "model": "m", "choices": [choice], "usage": _usage(len(ids))}


def _chunk(ids: list[int], body: dict[str, Any], finish: str | None) -> bytes:
    chunk = {"id": "x", "object": "text_completion.chunk", "model": "m", "choices": [legacy_choice(ids, body, finish)]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _tail(body: dict[str, Any], n: int) -> bytes:
    """The usage chunk where asked for, and ``[DONE]``."""
    out = b""
    if (body.get("stream_options") or {}).get("include_usage"):
        final = {"id": "x", "object": "text_completion.chunk", "model": "m", "choices": [], "usage": _usage(n)}
        out += b"data: " + json.dumps(final).encode() + b"\n\n"
    return out + b"data: [DONE]\n\n"


async def log(_: web.Request) -> web.Response:
    return web.json_response(LOG)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timing", choices=TIMINGS, required=True)
    parser.add_argument("--delay-s", type=float, default=0.3, help="whole-*, plain: the answer's delay (the least)")
    parser.add_argument("--delay-max-s", type=float, default=0.5, help="whole-random: the longest delay")
    parser.add_argument("--token-s", type=float, default=0.01, help="tokens: seconds per token")
    parser.add_argument("--seed", type=int, default=0, help="whole-random: the delays' seed")
    parser.add_argument("--diverge-at", type=int, default=0, metavar="K", help="0: never")
    parser.add_argument("--metrics", action="store_true", help="serve /metrics (the running gauge)")
    args = parser.parse_args()
    server = Server(args)
    app = web.Application()
    for prefix in ("", "/refuse"):
        app.router.add_get(f"{prefix}/v1/models", models)
        app.router.add_post(f"{prefix}/v1/completions", server.completions)
    app.router.add_get("/_log", log)
    if args.metrics:
        app.router.add_get("/metrics", running_gauge(STATE))
    await serve(app)


if __name__ == "__main__":
    run(main)
