"""How many SSE events per second one core decodes: SSEDecoder alone, and with StreamAccumulator.

Why it exists: the decoder and accumulator run inside every Locust user on the hot path; a
generator that spends its CPU parsing would itself slow the endpoint's clients down. The stream
is a 256-token vLLM ``/v1/completions`` stream in the shape of
``tests/loadgen/core/wire/fixtures/vllm_completions_stream.sse`` (one token per chunk, nulls present), in
two variants: text only, and with ``return_token_ids`` plus logprobs with 5 alternatives (the
canary configuration). Two chunkings: one network read per event (servers flush per event) and
1460-byte reads (one TCP segment each, cutting events and UTF-8 characters anywhere).

Run: ``/work/venv/bin/python benchmarks/sse_decoder.py`` (prints a table; no assertions).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import orjson

from loadgen.core.wire import StreamAccumulator
from loadgen.core.wire.sse import SSEDecoder

N_TOKENS = 256
WORDS = [" the", " café", " is", " open", " —", " 🎉", "\n", " yes", " and", " naïve", " 数据", " model"]
SEGMENT_BYTES = 1460
MIN_TIME_S = 0.4
REPEATS = 3


def vllm_stream(*, rich: bool) -> bytes:
    """A realistic vLLM completions stream: 256 token chunks, a usage chunk, [DONE]."""
    head = {"id": "cmpl-8f3c2a1e9b7d4c6a", "object": "text_completion", "created": 1767225600, "model": "Qwen/Q"}
    parts: list[bytes] = []
    offset = 0
    for i in range(N_TOKENS):
        token = WORDS[i % len(WORDS)]
        logprobs = None
        if rich:
            top = {token: -0.01 - i * 1e-4, **{f" alt{k}": -1.5 - k for k in range(5)}}
            logprobs = {
                "text_offset": [offset],
                "token_logprobs": [-0.01 - i * 1e-4],
                "tokens": [token],
                "top_logprobs": [top],
            }
        choice = {
            "index": 0,
            "text": token,
            "logprobs": logprobs,
            "finish_reason": "length" if i == N_TOKENS - 1 else None,
            "stop_reason": None,
            "prompt_token_ids": [151644, 8948, 198] if rich and i == 0 else None,
            "token_ids": [1000 + i] if rich else None,
        }
        chunk = {**head, "choices": [choice], "usage": None, "system_fingerprint": None, "metrics": None}
        parts.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
        offset += len(token)
    usage = {"prompt_tokens": 3, "total_tokens": 259, "completion_tokens": 256}
    parts.append(b"data: " + orjson.dumps({**head, "choices": [], "usage": usage}) + b"\n\n")
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


def per_event(raw: bytes) -> list[bytes]:
    return [piece + b"\n\n" for piece in raw.split(b"\n\n") if piece]


def segments(raw: bytes) -> list[bytes]:
    return [raw[i : i + SEGMENT_BYTES] for i in range(0, len(raw), SEGMENT_BYTES)]


def decode_only(chunks: list[bytes]) -> int:
    decoder = SSEDecoder()
    n = 0
    for chunk in chunks:
        n += len(decoder.feed(chunk))
    return n + len(decoder.flush())


def decode_and_accumulate(chunks: list[bytes]) -> int:
    decoder = SSEDecoder()
    acc = StreamAccumulator("completions")
    n = 0
    for chunk in chunks:
        for event in decoder.feed(chunk):
            acc.add(event.data)
            n += 1
    acc.finish()
    return n


def events_per_s(fn: Callable[[list[bytes]], int], chunks: list[bytes]) -> float:
    best = 0.0
    for _ in range(REPEATS):
        events = 0
        start = time.perf_counter()
        elapsed = 0.0
        while elapsed < MIN_TIME_S:
            events += fn(chunks)
            elapsed = time.perf_counter() - start
        best = max(best, events / elapsed)
    return best


def main() -> None:
    print(f"command: {sys.executable} benchmarks/sse_decoder.py")
    print(f"python {sys.version.split()[0]}; one core; best of {REPEATS} runs of >= {MIN_TIME_S} s each\n")
    header = (
        f"{'stream':<22}{'chunking':<14}{'bytes':>8}{'events':>8}"
        f"{'decode ev/s':>14}{'+accum ev/s':>14}{'+accum us/ev':>14}"
    )
    print(header)
    print("-" * len(header))
    for rich in (False, True):
        raw = vllm_stream(rich=rich)
        name = "ids+logprobs(top5)" if rich else "text only"
        for chunking, chunks in (("per event", per_event(raw)), (f"{SEGMENT_BYTES} B reads", segments(raw))):
            n_events = decode_only(chunks)
            if decode_and_accumulate(chunks) != n_events:
                raise SystemExit("decoder and decoder+accumulator saw different event counts")
            dec = events_per_s(decode_only, chunks)
            full = events_per_s(decode_and_accumulate, chunks)
            print(f"{name:<22}{chunking:<14}{len(raw):>8}{n_events:>8}{dec:>14,.0f}{full:>14,.0f}{1e6 / full:>14.1f}")


if __name__ == "__main__":
    main()
