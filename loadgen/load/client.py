"""One OpenAI-style request over a gevent-native HTTP client, timed by our own clocks, faults as data.

Why: Locust's recorded time for a streamed response is time-to-headers, and its session buffers
streamed lines; this module reads the body line by line, feeds the pure SSE decoder, and measures
latency and time to first token itself. It classifies every failure into an ``error_kind`` instead
of raising, so a busy or broken endpoint is measured, not crashed on. It never retries.

The endpoint is not trusted (docs/faults-and-secrets.md): every request has a total deadline (a
server trickling a byte at a time, or SSE keep-alive comments, would outlive any per-byte timeout),
a response-size cap, a check that the completion is one the request could have produced, and the
API key is redacted from everything kept of the answer (those two: ``loadgen.load.answer_checks``).

One entry point per caller, each sending its request's id (``X-Request-Id``; docs/design.md, "Joining ids"):
``send_canary`` (a canary, its whole answer parsed), ``send_burst`` (a burst's copies in one request, one
outcome per copy), ``send_background`` (a background request, its usage alone kept) and ``send_rescore`` (a
canary's ids sent back teacher-forced, its body kept for ``loadgen.core.wire.rescore``). They share one core,
``_exchange``.

Why this length: the core's fault classification, its two stream readers and the batch split all fill and
check the one ``Outcome`` under the one deadline; apart, each would have to know the others' cases.

Runs inside gevent (a Locust process). It does not import Locust and does not print.
"""

from __future__ import annotations

import errno
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import gevent
import orjson

from loadgen.core.errors import redact, redact_json
from loadgen.core.record import ErrorKind
from loadgen.core.scenario.schema import MAX_RESPONSE_BYTES
from loadgen.core.wire import (
    Completion,
    Kind,
    MalformedResponse,
    StreamAccumulator,
    StreamError,
    parse_body,
    parse_usage,
)
from loadgen.core.wire.batch import CopyAnswer, parse_batch
from loadgen.core.wire.sse import SSEDecoder
from loadgen.core.wire.sse_frames import FrameReader
from loadgen.load.answer_checks import completion_problem, redact_completion
from loadgen.load.deadlines import DeadlineHit, Deadlines, deadlines
from loadgen.load.holding import Progress
from loadgen.load.transport import (
    HTTPConnectionClosed,
    HTTPParseError,
    PooledClient,
    ResponseTooLarge,
    cap_body,
    whole_lines,
)

_MAX_ERROR_BODY = 500
SECONDS_PER_TOKEN = 2.0  # the default deadline's allowance per token asked for: slower than any real engine
ASSUMED_TOKENS = 1024  # a body whose max_tokens cannot be read is given this many
BACKGROUND_READ_EVERY_S = 0.05  # a background stream past its first token is read at most this often (see _read_frames)
_MAX_TOKENS_FIELD = re.compile(rb'"max_(?:new_)?tokens":\s*(\d+)')  # SGLang /generate: max_new_tokens


@dataclass(frozen=True, slots=True)
class Limits:
    """What one request may take: the scenario's ``endpoint`` timeouts and size cap.

    ``request_timeout_s`` is the total deadline, send to last byte; None derives it per request as
    ``read_timeout_s`` (the longest silence allowed anyway) plus ``SECONDS_PER_TOKEN`` per token the body
    asks for, so no answer a live engine streams is cut, yet a trickling one ends."""

    read_timeout_s: float
    request_timeout_s: float | None = None
    max_response_bytes: int = MAX_RESPONSE_BYTES

    def deadline_s(self, max_tokens: int | None) -> float:
        if self.request_timeout_s is not None:
            return self.request_timeout_s
        tokens = ASSUMED_TOKENS if max_tokens is None else max_tokens
        return self.read_timeout_s + SECONDS_PER_TOKEN * tokens


class EndpointClient(PooledClient):
    """geventhttpclient's client (through ``loadgen.load.transport``, its one seam) with the ``Limits`` every
    request sent through it obeys, and the sweep (``loadgen.load.deadlines``) that ends a request at its total
    deadline."""

    limits: Limits
    deadlines: Deadlines


@dataclass(slots=True)
class Outcome:
    sent_at: float
    latency_s: float | None
    ttft_s: float | None
    error_kind: ErrorKind | None = None
    error_message: str | None = None
    http_status: int | None = None
    completion: Completion | None = None  # None when the caller asked for usage only
    usage: dict[str, Any] | None = None
    response_bytes: int = 0
    cancelled: bool = False  # the greenlet was killed mid-request; the caller re-raises after recording
    parts: list[CopyAnswer] | None = None  # a burst in one request: each copy's part (``_split_batch``)
    body: bytes | None = None  # a re-score's answer as it came (``send_rescore``), parsed by its caller

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


def make_client(
    base_url: str,
    *,
    connect_timeout_s: float,
    read_timeout_s: float,
    api_key: str | None,
    request_timeout_s: float | None = None,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
) -> EndpointClient:
    """A one-connection client bound to ``base_url``'s host: the key can go nowhere else.

    ``read_timeout_s`` bounds each wait for a byte; ``request_timeout_s`` and ``max_response_bytes``
    (the scenario's ``endpoint`` fields) bound the whole request (``Limits``)."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    client = EndpointClient.connect(
        base_url, connect_timeout_s=connect_timeout_s, read_timeout_s=read_timeout_s, headers=headers
    )
    client.limits = Limits(read_timeout_s, request_timeout_s, max_response_bytes)
    client.deadlines = deadlines()
    return client


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


def send_canary(
    client: EndpointClient,
    path: str,
    kind: Kind,
    body: dict[str, Any],
    request_id: str,
    *,
    tokens_as_ids: bool = False,
    secret: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> Outcome:
    """One canary (a sweep's, a cold boot's): POST ``body`` as ``request_id`` and parse the whole answer into
    ``completion``; never raises for endpoint faults.

    ``request_id``: the canary record's (32 hex digits), sent as ``X-Request-Id`` and, on SGLang's
    ``/generate``, as ``rid`` in the body too (``body`` itself, what the record keeps, is left without it).
    ``tokens_as_ids``: the body asked vLLM for ``token_id:N`` token strings; read ids from them.
    ``secret``: the API key, removed from everything kept of the answer (a server may echo our headers).
    ``progress``: a streamed answer calls it with the number of its events that carried a generated token, at
    each one (``loadgen.load.phase`` opens a canary's background by it)."""
    max_tokens = body.get("max_tokens", body.get("sampling_params", {}).get("max_new_tokens"))
    return _exchange(
        client,
        path,
        kind,
        _on_wire(kind, body, request_id),
        request_id.encode(),
        stream=bool(body.get("stream")),
        tokens_as_ids=tokens_as_ids,
        secret=secret,
        max_tokens=max_tokens if type(max_tokens) is int else None,
        progress=progress,
    )


def send_burst(
    client: EndpointClient,
    path: str,
    kind: Kind,
    body: dict[str, Any],
    request_ids: list[str],
    *,
    max_tokens: int,
    tokens_as_ids: bool = False,
    secret: str | None = None,
) -> list[Outcome]:
    """A burst's copies in one unstreamed request (``body``: ``loadgen.core.wire.batch.batch_body``'s, one prompt
    per copy): one outcome per copy, each with the request's timing and status and its own part of the answer
    (or the whole request's fault).

    ``request_ids``: the copies' records', in prompt order. SGLang's ``/generate`` takes them as its ``rid``
    list, one per prompt; the one ``X-Request-Id`` carries the first (a completions prompt list has no id per
    prompt: vLLM numbers the prompts after the header's id, ``cmpl-<id>-<i>``)."""
    out = _exchange(
        client,
        path,
        kind,
        _on_wire(kind, body, request_ids),
        request_ids[0].encode(),
        stream=False,
        tokens_as_ids=tokens_as_ids,
        secret=secret,
        max_tokens=max_tokens,
        batch=len(request_ids),
    )
    return _split_batch(out, len(request_ids), max_tokens, secret)


def send_background(
    client: EndpointClient,
    path: str,
    kind: Kind,
    payload: bytes,
    request_id: bytes,
    *,
    stream: bool,
    max_tokens: int | None = None,
    secret: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> Outcome:
    """One background request, a body already serialised (``loadgen.load.background``; ``stream``: what it asks
    for): checked for the same faults as a canary's, but only its usage is kept (no ``completion``), since
    building one would be wasted work on the hot path. A stream is read by its frames
    (``loadgen.core.wire.sse_frames``): timing, status, usage and errors as the canary's full parse finds them,
    without parsing every token's chunk.

    ``request_id``: 32 hex digits, sent as ``X-Request-Id`` (on ``/generate`` the body carries it as ``rid``).
    ``max_tokens``: what the body asks for (read from ``payload`` when not given).
    ``progress``: a streamed response calls it with the running total of events seen, from the first that
    carried a generated token, once per piece of the body read (``loadgen.load.holding`` watches hand-overs
    with it: the first token, not the first byte, shows the engine runs the request; some servers send a role
    chunk at once)."""
    return _exchange(
        client,
        path,
        kind,
        payload,
        request_id,
        stream=stream,
        secret=secret,
        usage_only=True,
        progress=progress,
        max_tokens=max_tokens,
    )


def send_rescore(
    client: EndpointClient, path: str, kind: Kind, body: dict[str, Any], request_id: str, *, secret: str | None = None
) -> Outcome:
    """A re-score (``loadgen.core.wire.rescore.rescore_body``): unstreamed, one token asked, its answer kept whole
    in ``body`` for the caller to read; ``request_id`` as ``send_canary``'s."""
    payload = _on_wire(kind, body, request_id)
    return _exchange(client, path, kind, payload, request_id.encode(), stream=False, secret=secret, raw_body=True)


def _on_wire(kind: Kind, body: dict[str, Any], rid: str | list[str]) -> bytes:
    """``body`` as sent: on SGLang's ``/generate`` with the id(s) as ``rid`` too (one per prompt for a list)."""
    return orjson.dumps({**body, "rid": rid} if kind == "generate" else body)


def _exchange(
    client: EndpointClient,
    path: str,
    kind: Kind,
    payload: bytes,
    request_id: bytes,
    *,
    stream: bool,
    tokens_as_ids: bool = False,
    secret: str | None = None,
    usage_only: bool = False,
    progress: Callable[[int], None] | None = None,
    max_tokens: int | None = None,
    batch: int | None = None,
    raw_body: bool = False,
) -> Outcome:
    """The core the ``send_*`` entry points share: POST ``payload`` as ``request_id``, time it, read the answer
    as asked, and classify every fault into the outcome; never raises for endpoint faults.

    ``usage_only`` (background): keep the usage alone, a stream read by its frames, reporting to ``progress``
    (a canary's stream reports to it too, event by event).
    ``max_tokens``: what the body asks for (read from ``payload`` when not given): it sets the default
    deadline, and a completion longer than it is malformed.
    ``batch``: the unstreamed body carries this many prompts (``loadgen.core.wire.batch``): the answer is
    split into ``parts``, one per prompt, which ``_split_batch`` turns into one outcome each. ``raw_body``: the
    unstreamed answer is kept as it came, in ``body``."""
    if max_tokens is None:
        max_tokens = max_tokens_in(payload)
    limits = client.limits
    deadline_s = limits.deadline_s(max_tokens)
    sent_at = time.time()
    t0 = time.perf_counter()
    out = Outcome(sent_at=sent_at, latency_s=None, ttft_s=None)
    headers_seen = False
    try:
        client.deadlines.arm(deadline_s)  # the whole request: read_timeout_s only bounds each wait for a byte
        # a streamed response ends its connection: some servers (llama.cpp's) close it after the stream while
        # answering keep-alive, and a POST sent on such a socket fails; never reuse it, never retry a POST
        resp = client.post_bytes(path, payload, request_id, close=stream)
        headers_seen = True
        out.http_status = resp.status_code
        cap_body(resp, limits.max_response_bytes)
        if not 200 <= resp.status_code < 300:
            raw = resp.read()
            out.response_bytes = len(raw)
            out.error_kind = "http_status"
            out.error_message = f"HTTP {resp.status_code}: {_error_message(raw)}"
        elif stream and usage_only:
            _read_frames(resp, kind, out, t0, progress)
        elif stream:
            _read_stream(resp, kind, out, t0, tokens_as_ids, progress)
        else:
            raw = resp.read()
            out.response_bytes = len(raw)
            if raw_body:
                out.body = redact(raw.decode("utf-8", "replace"), secret).encode() if secret else raw
            elif usage_only:
                out.usage = parse_usage(raw, kind)
            elif batch is not None:
                out.parts = parse_batch(kind, raw, batch, tokens_as_ids=tokens_as_ids)
            else:
                out.completion = parse_body(kind, raw, tokens_as_ids=tokens_as_ids)
                out.usage = out.completion.usage
    except StreamError as exc:
        out.error_kind, out.error_message = "stream_error", exc.server_message[:_MAX_ERROR_BODY]
    except MalformedResponse as exc:
        out.error_kind, out.error_message = "malformed_body", str(exc)
    except ResponseTooLarge:
        out.error_kind = "response_too_large"
        out.error_message = f"response cut after {limits.max_response_bytes} bytes (endpoint.max_response_bytes)"
    except gevent.GreenletExit:
        out.error_kind, out.error_message, out.cancelled = "cancelled", "request cut off by the end of its user", True
    except DeadlineHit:
        out.error_kind = "timeout"
        out.error_message = f"total deadline of {deadline_s:g} s hit (endpoint.request_timeout_s); the request was cut"
    except TimeoutError as exc:
        out.error_kind, out.error_message = "timeout", f"{'read' if headers_seen else 'connect or read'} timeout: {exc}"
    except (HTTPConnectionClosed, HTTPParseError) as exc:
        out.error_kind = "truncated_stream" if headers_seen else "connection"
        out.error_message = f"connection closed: {exc}"
    except OSError as exc:
        kind_: ErrorKind = (
            "truncated_stream" if headers_seen and exc.errno in (errno.ECONNRESET, errno.EPIPE) else "connection"
        )
        out.error_kind, out.error_message = kind_, f"{type(exc).__name__}: {exc}"
    finally:
        client.deadlines.disarm()
    out.latency_s = time.perf_counter() - t0
    if out.ok and out.completion is not None and (problem := completion_problem(out.completion, max_tokens)):
        out.error_kind, out.error_message, out.completion = "malformed_body", problem, None
    if secret:
        _redact_outcome(out, secret)
    return out


def _split_batch(out: Outcome, n: int, max_tokens: int | None, secret: str | None = None) -> list[Outcome]:
    """One outcome per copy of a burst sent in one request: each with the request's timing and status, its own
    part of the answer (checked as a lone answer would be), or the whole request's fault."""
    copies = []
    for i in range(n):
        one = replace(out, parts=None, response_bytes=out.response_bytes // n)
        part = out.parts[i] if out.ok and out.parts is not None else None
        if isinstance(part, StreamError):
            one.error_kind, one.error_message = "stream_error", part.server_message[:_MAX_ERROR_BODY]
        elif isinstance(part, MalformedResponse):
            one.error_kind, one.error_message = "malformed_body", str(part)
        elif part is not None:
            one.completion, one.usage = part, part.usage
            if problem := completion_problem(part, max_tokens):
                one.error_kind, one.error_message, one.completion = "malformed_body", problem, None
        if secret:
            _redact_outcome(one, secret)
        copies.append(one)
    return copies


def max_tokens_in(payload: bytes) -> int | None:
    """The ``max_tokens`` a serialised body asks for, or None. Read from the end: the background bodies
    put it after the prompt, and inside a JSON string the quotes around the name would be escaped."""
    start = max(payload.rfind(b'"max_tokens":'), payload.rfind(b'"max_new_tokens":'))
    match = _MAX_TOKENS_FIELD.match(payload, start) if start >= 0 else None
    return int(match.group(1)) if match else None


def _redact_outcome(out: Outcome, secret: str) -> None:
    """Take the API key out of everything an answer put in ``out``: error text, usage, completion."""
    if out.error_message:
        out.error_message = redact(out.error_message, secret)
    if out.usage is not None:
        out.usage = redact_json(out.usage, secret)
    if out.completion is not None:
        out.completion.usage = out.usage
        redact_completion(out.completion, secret)


def _read_stream(
    resp: Any, kind: Kind, out: Outcome, t0: float, tokens_as_ids: bool, progress: Callable[[int], None] | None
) -> None:
    """A canary's stream: every event decoded and folded into the completion; ``progress`` hears the count of
    events that carried a token, at each."""
    decoder = SSEDecoder()
    acc = StreamAccumulator(kind, tokens_as_ids=tokens_as_ids)
    seen = 0
    try:
        for lines in whole_lines(resp, out):
            for event in decoder.feed(lines):
                if acc.add(event.data):
                    if out.ttft_s is None:
                        out.ttft_s = time.perf_counter() - t0
                    seen += 1
                    if progress is not None:
                        progress(seen)
    finally:
        resp.release()  # a stream left mid-body (a bad chunk) must give its connection back to the pool now
    for event in decoder.flush():
        acc.add(event.data)
    out.completion = acc.finish()
    out.usage = out.completion.usage
    if not acc.done:
        out.error_kind, out.error_message = "truncated_stream", "stream ended without data: [DONE]"


def _read_frames(resp: Any, kind: Kind, out: Outcome, t0: float, progress: Callable[[int], None] | None) -> None:
    """A background stream: ``_read_stream``'s outcome (time to first token, progress once per piece read,
    usage, errors, truncation) from ``FrameReader``, which parses only the frames that can change it.

    Between its first token and ``[DONE]`` the stream is read at most every ``BACKGROUND_READ_EVERY_S``:
    the events that arrived meanwhile wait in the socket and come in one wake-up and as few system calls
    as their size needs, where reading each as it comes costs both per event (most of a generator core at
    256 streams of a fast engine). What is given up is the hand-over's and the end's resolution, at most
    that interval; ``ttft_s`` and ``[DONE]`` are exact. A read that fills its block is followed at once by
    the next (``loadgen.load.transport.whole_lines``): an engine whose events are large (SGLang's
    ``/generate`` repeats the whole output so far in each) writes more than a block per interval, and one
    block per interval put such a stream's end seconds behind the engine's, its slot counted held for a
    request the engine had finished
    (docs/results/sglang-h200/README.md)."""
    reader = FrameReader(kind)

    def pause() -> float:
        if not reader.counted or reader.done:
            return 0.0
        if isinstance(progress, Progress):  # a background slot: never read past its hand-over point
            return progress.read_pause(BACKGROUND_READ_EVERY_S)
        return BACKGROUND_READ_EVERY_S

    try:
        for lines in whole_lines(resp, out, pause):
            if reader.feed(lines):
                if out.ttft_s is None:
                    out.ttft_s = time.perf_counter() - t0
                if progress is not None:
                    progress(reader.counted)
    finally:
        resp.release()
        if reader.counted and out.ttft_s is None:  # the piece with the first token also held an error
            out.ttft_s = time.perf_counter() - t0
    summary = reader.finish()
    out.usage = summary.usage
    if not summary.done:
        out.error_kind, out.error_message = "truncated_stream", "stream ended without data: [DONE]"
