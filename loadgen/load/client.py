"""One OpenAI-style request over a gevent-native HTTP client, timed by our own clocks, faults as data.

Why: Locust's recorded time for a streamed response is time-to-headers, and its session buffers
streamed lines; this module reads the body line by line, feeds the pure SSE decoder, and measures
latency and time to first token itself. It classifies every failure into an ``error_kind`` instead
of raising, so a busy or broken endpoint is measured, not crashed on. It never retries.

Runs inside gevent (a Locust process). It does not import Locust and does not print.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent
import orjson
from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError

from loadgen.wire import (
    Completion,
    Kind,
    MalformedResponse,
    StreamAccumulator,
    StreamError,
    parse_body,
    parse_usage,
)
from loadgen.wire.sse import SSEDecoder

_MAX_ERROR_BODY = 500
_CLOSE = {"Connection": "close"}


@dataclass(slots=True)
class Outcome:
    sent_at: float
    latency_s: float | None
    ttft_s: float | None
    error_kind: str | None = None
    error_message: str | None = None
    http_status: int | None = None
    completion: Completion | None = None  # None when the caller asked for usage only
    usage: dict[str, Any] | None = None
    response_bytes: int = 0
    cancelled: bool = False  # the greenlet was killed mid-request; the caller re-raises after recording

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    def failure(self) -> RuntimeError | None:
        """The fault as an exception (how Locust's statistics file a failed request), None when ok."""
        return None if self.ok else RuntimeError(f"{self.error_kind}: {self.error_message}")


class Inflight:
    """Requests in flight from this process; one gevent thread, so plain integers are safe."""

    def __init__(self) -> None:
        self.canary = 0
        self.background = 0

    @property
    def total(self) -> int:
        return self.canary + self.background


def make_client(base_url: str, *, connect_timeout_s: float, read_timeout_s: float, api_key: str | None) -> HTTPClient:
    """A one-connection client bound to ``base_url``'s host: the key can go nowhere else."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return HTTPClient.from_url(
        base_url,
        concurrency=1,
        connection_timeout=connect_timeout_s,
        network_timeout=read_timeout_s,
        headers=headers,
    )


def _error_message(body: bytes) -> str:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:_MAX_ERROR_BODY].decode("utf-8", "replace")
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])[:_MAX_ERROR_BODY]
        if isinstance(err, str):
            return err[:_MAX_ERROR_BODY]
    return body[:_MAX_ERROR_BODY].decode("utf-8", "replace")


def send(
    client: HTTPClient,
    path: str,
    kind: Kind,
    body: dict[str, Any],
    *,
    tokens_as_ids: bool = False,
    secret: str | None = None,
) -> Outcome:
    """POST ``body`` and return what happened; never raises for endpoint faults.

    ``tokens_as_ids``: the body asked vLLM for ``token_id:N`` token strings; read ids from them.
    ``secret``: the API key, removed from any error text a server echoes back before it is recorded."""
    return send_payload(
        client,
        path,
        kind,
        orjson.dumps(body),
        stream=bool(body.get("stream")),
        tokens_as_ids=tokens_as_ids,
        secret=secret,
    )


def send_payload(
    client: HTTPClient,
    path: str,
    kind: Kind,
    payload: bytes,
    *,
    stream: bool,
    tokens_as_ids: bool = False,
    secret: str | None = None,
    usage_only: bool = False,
    progress: Callable[[int], None] | None = None,
) -> Outcome:
    """``send`` for a body already serialised (``stream``: what the body asks for).

    ``usage_only``: a whole body is checked for the same faults but only its usage is kept (no
    ``completion``): background traffic, where building one would be wasted work on the hot path.
    ``progress``: a streamed response calls it with the number of generated tokens seen so far, after
    each event that carried one (``loadgen.load.holding`` watches hand-overs with it: the first token,
    not the first byte, shows the engine runs the request; some servers send a role chunk at once)."""
    sent_at = time.time()
    t0 = time.perf_counter()
    out = Outcome(sent_at=sent_at, latency_s=None, ttft_s=None)
    headers_seen = False
    try:
        # a streamed response ends its connection: some servers (llama.cpp's) close it after the stream while
        # answering keep-alive, and a POST sent on such a socket fails; never reuse it, never retry a POST
        resp = client.request("POST", path, body=payload, headers=_CLOSE if stream else None)
        headers_seen = True
        out.http_status = resp.status_code
        if not 200 <= resp.status_code < 300:
            raw = resp.read()
            out.response_bytes = len(raw)
            out.error_kind = "http_status"
            out.error_message = f"HTTP {resp.status_code}: {_error_message(raw)}"
        elif stream:
            _read_stream(resp, kind, out, t0, tokens_as_ids, progress)
        else:
            raw = resp.read()
            out.response_bytes = len(raw)
            if usage_only:
                out.usage = parse_usage(raw)
            else:
                out.completion = parse_body(kind, raw, tokens_as_ids=tokens_as_ids)
                out.usage = out.completion.usage
    except StreamError as exc:
        out.error_kind, out.error_message = "stream_error", exc.server_message[:_MAX_ERROR_BODY]
    except MalformedResponse as exc:
        out.error_kind, out.error_message = "malformed_body", str(exc)
    except gevent.GreenletExit:
        out.error_kind, out.error_message, out.cancelled = "cancelled", "request cut off by the end of its user", True
    except (TimeoutError, gevent.Timeout) as exc:
        out.error_kind, out.error_message = "timeout", f"{'read' if headers_seen else 'connect or read'} timeout: {exc}"
    except (HTTPConnectionClosed, HTTPParseError) as exc:
        out.error_kind = "truncated_stream" if headers_seen else "connection"
        out.error_message = f"connection closed: {exc}"
    except OSError as exc:
        kind_ = "truncated_stream" if headers_seen and exc.errno in (errno.ECONNRESET, errno.EPIPE) else "connection"
        out.error_kind, out.error_message = kind_, f"{type(exc).__name__}: {exc}"
    out.latency_s = time.perf_counter() - t0
    if secret and out.error_message and secret in out.error_message:
        out.error_message = out.error_message.replace(secret, "[redacted]")  # a server that echoes our headers
    return out


def reset_cache(client: HTTPClient, path: str) -> int | None:
    """POST the engine's prefix-cache reset route; its HTTP status, or None when it could not be reached."""
    try:
        resp = client.request("POST", path, body=b"")
        resp.read()
        return int(resp.status_code)
    except (OSError, HTTPParseError, gevent.Timeout):
        return None


def _read_stream(
    resp: Any, kind: Kind, out: Outcome, t0: float, tokens_as_ids: bool, progress: Callable[[int], None] | None
) -> None:
    decoder = SSEDecoder()
    acc = StreamAccumulator(kind, tokens_as_ids=tokens_as_ids)
    tokens = 0
    while True:
        line = resp.readline(b"\n")
        if not line:
            break
        out.response_bytes += len(line)
        for event in decoder.feed(line):
            if acc.add(event.data):
                if out.ttft_s is None:
                    out.ttft_s = time.perf_counter() - t0
                if progress is not None:
                    tokens += 1
                    progress(tokens)
    for event in decoder.flush():
        acc.add(event.data)
    out.completion = acc.finish()
    out.usage = out.completion.usage
    if not acc.done:
        out.error_kind, out.error_message = "truncated_stream", "stream ended without data: [DONE]"
