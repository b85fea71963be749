"""Canned OpenAI-style answers for the near-zero-latency benchmark server, built once at start.

Why: the generator ceiling is measured against a server that does no work per request, so every
byte it sends is prepared here, before the first request. The completion looks like what vLLM
sends a canary (``return_token_ids``, legacy logprobs with alternatives), so the tool's parsing
cost is the real one. Pure: no I/O, no clocks.
"""

from __future__ import annotations

from typing import Any

import orjson

WORDS = [" the", " café", " is", " open", " —", " 🎉", "\n", " yes", " and", " naïve", " 数据", " model"]
MODEL = "bench/fixed"
_HEAD: dict[str, Any] = {"id": "cmpl-bench", "object": "text_completion", "created": 1767225600, "model": MODEL}


def _token(i: int) -> str:
    return WORDS[i % len(WORDS)]


def _top(i: int, top_k: int) -> dict[str, float]:
    return {_token(i): -0.01 - i * 1e-4, **{f" alt{k}": -1.5 - k for k in range(max(top_k - 1, 0))}}


def completion_body(n_tokens: int, top_k: int) -> bytes:
    """One whole ``/v1/completions`` response of ``n_tokens`` tokens; ``top_k`` > 0: with ids and logprobs."""
    tokens = [_token(i) for i in range(n_tokens)]
    offsets = [sum(len(t) for t in tokens[:i]) for i in range(n_tokens)]
    choice: dict[str, Any] = {
        "index": 0,
        "text": "".join(tokens),
        "logprobs": None,
        "finish_reason": "length",
        "stop_reason": None,
        "token_ids": None,
    }
    if top_k:
        choice["logprobs"] = {
            "text_offset": offsets,
            "token_logprobs": [-0.01 - i * 1e-4 for i in range(n_tokens)],
            "tokens": tokens,
            "top_logprobs": [_top(i, top_k) for i in range(n_tokens)],
        }
        choice["token_ids"] = [1000 + i for i in range(n_tokens)]
    usage = {"prompt_tokens": 16, "total_tokens": 16 + n_tokens, "completion_tokens": n_tokens}
    return orjson.dumps({**_HEAD, "choices": [choice], "usage": usage})


def stream_events(n_tokens: int, top_k: int) -> list[bytes]:
    """The same answer as SSE events, one token per event, then usage and ``[DONE]`` (``top_k`` 0: text only)."""
    events: list[bytes] = []
    offset = 0
    for i in range(n_tokens):
        token = _token(i)
        logprobs = None
        if top_k:
            logprobs = {
                "text_offset": [offset],
                "token_logprobs": [-0.01 - i * 1e-4],
                "tokens": [token],
                "top_logprobs": [_top(i, top_k)],
            }
        choice = {
            "index": 0,
            "text": token,
            "logprobs": logprobs,
            "finish_reason": "length" if i == n_tokens - 1 else None,
            "stop_reason": None,
            "token_ids": [1000 + i] if top_k else None,
        }
        events.append(b"data: " + orjson.dumps({**_HEAD, "choices": [choice], "usage": None}) + b"\n\n")
        offset += len(token)
    usage = {"prompt_tokens": 16, "total_tokens": 16 + n_tokens, "completion_tokens": n_tokens}
    events.append(b"data: " + orjson.dumps({**_HEAD, "choices": [], "usage": usage}) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


def models_body() -> bytes:
    return orjson.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]})


def http_response(body: bytes, *, content_type: bytes = b"application/json", status: bytes = b"200 OK") -> bytes:
    """A whole keep-alive HTTP/1.1 response with a Content-Length."""
    head = (
        b"HTTP/1.1 "
        + status
        + b"\r\nContent-Type: "
        + content_type
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nConnection: keep-alive\r\n\r\n"
    )
    return head + body


def chunked_stream_response(events: list[bytes]) -> bytes:
    """A keep-alive ``text/event-stream`` response, one HTTP chunk per event, as uvicorn sends them."""
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
    )
    parts = [head]
    for event in events:
        parts.append(f"{len(event):x}\r\n".encode() + event + b"\r\n")
    parts.append(b"0\r\n\r\n")
    return b"".join(parts)
