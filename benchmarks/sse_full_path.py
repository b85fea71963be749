"""SSE events per second per core through the full streaming path, beside the decoder alone and a bare read.

Why: ``sse_decoder.py`` prices the pure decoder and accumulator; a streamed canary also pays the
client's line reads, chunked transfer decoding and the Outcome. This script streams a 256-token
vLLM-shaped completion (token ids and top-5 logprobs, one HTTP chunk per event, from
``fastserver.py`` on another core) and measures, alternating in one gevent process:
``decoder+accum`` (the same bytes already in memory, SSEDecoder + StreamAccumulator),
``bare readline`` (geventhttpclient reads every line, decodes nothing) and ``full path``
(``loadgen.load.client.send_canary`` with ``stream: true``: read, decode, accumulate, time to first token).

Run: ``python benchmarks/sse_full_path.py [--quick] [--streams 1] [--seconds 3] [--reps 3]``. With several
streams, both network rows fall (CPU per event rises with concurrency for the bare read too): see the notes.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Callable  # noqa: E402
from functools import partial  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
import orjson  # noqa: E402
from canned import stream_events  # noqa: E402
from harness import command_line, cores, fast_server, median, table  # noqa: E402
from sse_decoder import decode_and_accumulate  # noqa: E402

from loadgen.load.client import make_client, send_canary  # noqa: E402

TOKENS, TOP_K = 256, 5
EVENTS = TOKENS + 2  # token events, the usage event, [DONE]
BODY: dict[str, Any] = {
    "model": "bench/fixed",
    "prompt": "x",
    "max_tokens": TOKENS,
    "temperature": 0,
    "stream": True,
    "stream_options": {"include_usage": True},
    "logprobs": TOP_K,
    "return_token_ids": True,
}
PATH = "/v1/completions"


def bare_stream(client: Any) -> int:
    resp = client.request("POST", PATH, body=orjson.dumps(BODY))
    n = 0
    while True:
        line = resp.readline(b"\n")
        if not line:
            return n // 2  # "data: ..." and the blank line after it
        n += 1


def full_stream(client: Any) -> int:
    out = send_canary(client, PATH, "completions", BODY, uuid.uuid4().hex)
    if not out.ok or out.completion is None or len(out.completion.token_ids or []) != TOKENS:
        raise SystemExit(f"full path failed: {out.error_kind}: {out.error_message}")
    return EVENTS


def measure(loops: list[Callable[[], int]], seconds: float) -> tuple[float, float]:
    """(events/s, events per CPU second), one greenlet per callable, each calling it until time is up."""
    counted = [0]
    stop_at = time.perf_counter() + seconds

    def loop(one: Callable[[], int]) -> None:
        while time.perf_counter() < stop_at:
            events = one()  # not ``counted[0] += one()``: that reads the total before the call switches greenlets
            counted[0] += events

    t0, c0 = time.perf_counter(), os.times()
    gevent.joinall([gevent.spawn(loop, one) for one in loops], raise_error=True)
    t1, c1 = time.perf_counter(), os.times()
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    return counted[0] / (t1 - t0), counted[0] / cpu if cpu > 0 else float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 reps of 1.5 s")
    p.add_argument("--streams", type=int, default=1, help="concurrent streams (each its own connection)")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    if args.quick:
        args.reps, args.seconds = 2, 1.5
    server_cpu, gen_cpu = cores()
    print(f"command: {command_line()}")
    print(
        f"{TOKENS}-token stream, ids + top-{TOP_K} logprobs, one HTTP chunk per event; server on core {server_cpu}, "
        f"this process on core {gen_cpu}; {args.streams} stream(s); {args.reps} reps x {args.seconds:g} s\n"
    )
    raw = b"".join(stream_events(TOKENS, TOP_K))
    segments = [raw[i : i + 1460] for i in range(0, len(raw), 1460)]
    results: dict[str, list[tuple[float, float]]] = {"decoder+accum (memory)": [], "bare readline": [], "full path": []}
    with fast_server(server_cpu, "--stream-tokens", str(TOKENS), "--top-k", str(TOP_K)) as (url, _):
        os.sched_setaffinity(0, {gen_cpu})
        clients = [make_client(url, connect_timeout_s=10, read_timeout_s=60, api_key=None) for _ in range(args.streams)]
        loops: dict[str, list[Callable[[], int]]] = {
            "decoder+accum (memory)": [partial(decode_and_accumulate, segments)],
            "bare readline": [partial(bare_stream, c) for c in clients],
            "full path": [partial(full_stream, c) for c in clients],
        }
        for rep in range(args.reps):
            for name in list(results) if rep % 2 == 0 else list(results)[::-1]:
                results[name].append(measure(loops[name], args.seconds))
        for c in clients:
            c.close()
    base = median([r[1] for r in results["bare readline"]])
    rows = []
    for name, rs in results.items():
        per_cpu = median([r[1] for r in rs])
        rows.append((name, f"{median([r[0] for r in rs]):,.0f}", f"{per_cpu:,.0f}", f"{per_cpu / base:.2f}x"))
    print(table(["path", "events/s", "events/CPU-s", "vs bare"], rows, [26, 12, 14, 9]))
    print(f"\nmedians over {args.reps} reps; {EVENTS} events per stream; decoder row: 1460-byte chunks, one greenlet")


if __name__ == "__main__":
    main()
