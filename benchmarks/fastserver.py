"""A near-zero-latency OpenAI-style server for the generator benchmarks: canned bytes on a raw asyncio Protocol.

Why: the generator ceiling is "how fast can the tool send and record", so the server must cost far
less per request than the client. No framework, no JSON decoding: it finds the end of the headers,
reads ``Content-Length`` bytes of body, and writes a response prepared at start (whole completion,
or an SSE stream in HTTP chunks when the body holds ``"stream":true``; with token ids and logprobs
when the body asks for ``logprobs``, text only otherwise, as a real server answers). Keep-alive, no pipelining
assumptions beyond "requests arrive in order". It must not be used as a test double for dialects:
it answers every POST with the same completion.

With ``--rate R`` a stream is paced as an engine's decode loop sends it: one event per stream every
``1/R`` s, every stream in the same step (``sse_background.py``).

With ``--metrics FILE`` it answers ``GET /metrics`` with that file (a real engine's exposition), so a run scrapes
it as it would an engine (``scrape_cost.py``); without, ``/metrics`` is a 404 and nothing is scraped.

Run: ``python benchmarks/fastserver.py [--cpu N] [--tokens 64] [--top-k 2] [--stream-tokens 64] [--rate R]
[--metrics FILE]``; prints ``READY http://127.0.0.1:PORT``. ``GET /_served`` returns the number of completions
served.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time
from pathlib import Path

from canned import (
    chunked_stream_response,
    completion_body,
    http_response,
    models_body,
    stream_events,
)

_NOT_FOUND = http_response(b'{"error":{"message":"not found"}}', status=b"404 Not Found")
_STREAM_MARKERS = (b'"stream":true', b'"stream": true')


class Canned:
    """The prepared responses and a served-count."""

    def __init__(self, tokens: int, top_k: int, stream_tokens: int, metrics: bytes | None = None) -> None:
        self.whole = http_response(completion_body(tokens, top_k))
        self.stream = chunked_stream_response(stream_events(stream_tokens, top_k))
        self.whole_plain = http_response(completion_body(tokens, 0))
        self.stream_plain = chunked_stream_response(stream_events(stream_tokens, 0))
        # paced streams (--rate): the head, then one HTTP chunk per engine step
        self.stream_parts = _chunks(stream_events(stream_tokens, top_k))
        self.stream_plain_parts = _chunks(stream_events(stream_tokens, 0))
        self.models = http_response(models_body())
        self.metrics = None if metrics is None else http_response(metrics, content_type=b"text/plain; version=0.0.4")
        self.served = 0

    def answer(self, request_line: bytes, body: bytes) -> bytes:
        method, _, rest = request_line.partition(b" ")
        path = rest.partition(b" ")[0]
        if method == b"POST" and path.endswith(b"completions"):
            self.served += 1
            stream = any(m in body for m in _STREAM_MARKERS)
            if b'"logprobs"' in body:
                return self.stream if stream else self.whole
            return self.stream_plain if stream else self.whole_plain
        if path == b"/v1/models":
            return self.models
        if path == b"/metrics" and self.metrics is not None:
            return self.metrics
        if path == b"/_served":
            return http_response(str(self.served).encode())
        return _NOT_FOUND


def _chunks(events: list[bytes]) -> list[bytes]:
    """``chunked_stream_response`` in pieces: the head with the first event, then one piece per event, the
    last piece carrying the closing chunk."""
    whole = chunked_stream_response(events)
    head_end = whole.index(b"\r\n\r\n") + 4
    pieces = [f"{len(e):x}\r\n".encode() + e + b"\r\n" for e in events]
    pieces[-1] += b"0\r\n\r\n"
    return [whole[:head_end] + pieces[0], *pieces[1:]]


class Pacer:
    """An engine's decode loop: every ``1/rate`` s, every stream in flight gets its next event (all in step,
    as one batch step emits one token per request). The first event goes out at the next step."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate
        self.streams: list[tuple[asyncio.Transport, list[bytes], list[int]]] = []
        self.started = False

    def add(self, transport: asyncio.Transport, parts: list[bytes]) -> None:
        self.streams.append((transport, parts, [0]))
        if not self.started:
            self.started = True
            asyncio.get_running_loop().call_later(self.interval, self._step, time.perf_counter())

    def _step(self, due: float) -> None:
        kept = []
        for transport, parts, at in self.streams:
            if transport.is_closing():
                continue
            transport.write(parts[at[0]])
            at[0] += 1
            if at[0] < len(parts):
                kept.append((transport, parts, at))
        self.streams = kept
        nxt = due + self.interval  # steady: a late step does not shift the ones after it
        asyncio.get_running_loop().call_later(max(0.0, nxt - time.perf_counter()), self._step, nxt)


def _content_length(head: bytes) -> int:
    lower = head.lower()
    at = lower.find(b"\r\ncontent-length:")
    if at < 0:
        return 0
    end = lower.find(b"\r\n", at + 2)
    return int(lower[at + 17 : end if end >= 0 else None].strip())


class Connection(asyncio.Protocol):
    def __init__(self, canned: Canned, pacer: Pacer | None = None) -> None:
        self.canned = canned
        self.pacer = pacer
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        assert self.transport is not None
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end]
            total = end + 4 + _content_length(head)
            if len(self.buf) < total:
                return
            body = self.buf[end + 4 : total]
            self.buf = self.buf[total:]
            answer = self.canned.answer(head.partition(b"\r\n")[0], body)
            if self.pacer is not None and answer in (self.canned.stream, self.canned.stream_plain):
                parts = self.canned.stream_parts if answer is self.canned.stream else self.canned.stream_plain_parts
                self.pacer.add(self.transport, parts)
            else:
                self.transport.write(answer)


async def serve(host: str, port: int, canned: Canned, rate: float = 0.0) -> None:
    loop = asyncio.get_running_loop()
    pacer = Pacer(rate) if rate > 0 else None
    server = await loop.create_server(lambda: Connection(canned, pacer), host, port, backlog=2048)
    bound = server.sockets[0].getsockname()[1]
    print(f"READY http://{host}:{bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--cpu", type=int, default=None, help="pin this process to one core")
    p.add_argument("--tokens", type=int, default=64, help="tokens in the whole completion")
    p.add_argument("--top-k", type=int, default=2, help="logprob alternatives per token (0: no logprobs)")
    p.add_argument("--stream-tokens", type=int, default=64, help="token events in a streamed answer")
    p.add_argument("--rate", type=float, default=0.0, help="stream events per second per stream (0: all at once)")
    p.add_argument("--metrics", type=Path, default=None, help="answer GET /metrics with this file's bytes")
    args = p.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    metrics = None if args.metrics is None else args.metrics.read_bytes()
    asyncio.run(serve(args.host, args.port, Canned(args.tokens, args.top_k, args.stream_tokens, metrics), args.rate))


if __name__ == "__main__":
    main()
