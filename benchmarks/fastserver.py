"""A near-zero-latency OpenAI-style server for the generator benchmarks: canned bytes on a raw asyncio Protocol.

Why: the generator ceiling is "how fast can the tool send and record", so the server must cost far
less per request than the client. No framework, no JSON decoding: it finds the end of the headers,
reads ``Content-Length`` bytes of body, and writes a response prepared at start (whole completion,
or an SSE stream in HTTP chunks when the body holds ``"stream":true``; with token ids and logprobs
when the body asks for ``logprobs``, text only otherwise, as a real server answers). Keep-alive, no pipelining
assumptions beyond "requests arrive in order". It must not be used as a test double for dialects:
it answers every POST with the same completion.

Run: ``python benchmarks/fastserver.py [--cpu N] [--tokens 64] [--top-k 2] [--stream-tokens 64]``;
prints ``READY http://127.0.0.1:PORT``. ``GET /_served`` returns the number of completions served.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal

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

    def __init__(self, tokens: int, top_k: int, stream_tokens: int) -> None:
        self.whole = http_response(completion_body(tokens, top_k))
        self.stream = chunked_stream_response(stream_events(stream_tokens, top_k))
        self.whole_plain = http_response(completion_body(tokens, 0))
        self.stream_plain = chunked_stream_response(stream_events(stream_tokens, 0))
        self.models = http_response(models_body())
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
        if path == b"/_served":
            return http_response(str(self.served).encode())
        return _NOT_FOUND


def _content_length(head: bytes) -> int:
    lower = head.lower()
    at = lower.find(b"\r\ncontent-length:")
    if at < 0:
        return 0
    end = lower.find(b"\r\n", at + 2)
    return int(lower[at + 17 : end if end >= 0 else None].strip())


class Connection(asyncio.Protocol):
    def __init__(self, canned: Canned) -> None:
        self.canned = canned
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
            self.transport.write(self.canned.answer(head.partition(b"\r\n")[0], body))


async def serve(host: str, port: int, canned: Canned) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(canned), host, port, backlog=2048)
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
    args = p.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    asyncio.run(serve(args.host, args.port, Canned(args.tokens, args.top_k, args.stream_tokens)))


if __name__ == "__main__":
    main()
