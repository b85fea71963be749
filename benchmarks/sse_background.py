"""SSE events per CPU-second at 8, 64 and 256 concurrent paced streams: background path, canary path, bare parser.

Why: a GPU engine streams one event per token to every request in its batch; at 256 streams and tens of
tokens a second that is more events than one core of a client that parses each of them can read, and the
generator, not the engine, sets the level. Background streams need only their timing, status
and usage, so ``loadgen.load.client.send_background`` reads them by their frames
(``loadgen.core.wire.sse_frames``); canaries keep the full parse. This script measures, in one gevent process
pinned to one core, against ``fastserver.py --rate R`` on another core (every stream gets its next event
every ``1/R`` s, all in step, as an engine's decode step emits them):

- ``bare parser``: geventhttpclient's ``readline`` and ``orjson.loads`` of every ``data:`` event, nothing else;
- ``background (frames)``: ``send_background(..., progress=...)``, as a background user sends;
- ``canary (full parse)``: ``send_canary`` building the whole ``Completion``; this is also how background
  streams were read before the frame reader (the old path), so its row is the before, the row above the after.

Targets: background >= 1.5x the bare parser, canary >= 0.7x. Events per CPU-second of this
process (user + system, ``time.process_time``), medians over reps, paths alternating within each rep; "CPU s"
is a path's median CPU seconds per rep (the fewer, the coarser the machine's noise makes its ratio).

Run: ``python benchmarks/sse_background.py [--quick] [--streams 8,64,256] [--rate 50] [--tokens 64]``.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Callable  # noqa: E402

import gevent  # noqa: E402
import orjson  # noqa: E402
from harness import command_line, cores, fast_server, median, table  # noqa: E402

from loadgen.load.client import EndpointClient, make_client, send_background, send_canary  # noqa: E402
from loadgen.load.holding import Holding, Progress, Slot  # noqa: E402

PATH = "/v1/completions"
HANDOVER_S = 0.05  # background.handover_s's default
PATHS = ("bare parser", "background (frames)", "canary (full parse)")


def body(tokens: int) -> bytes:
    """A background-shaped body: streamed, usage asked for, no logprobs (the server then sends text chunks)."""
    return orjson.dumps(
        {
            "model": "bench/fixed",
            "prompt": "x",
            "max_tokens": tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )


def bare(client: EndpointClient, payload: bytes) -> int:
    resp = client.request("POST", PATH, body=payload, headers={"Connection": "close"})
    events = 0
    try:
        while line := resp.readline(b"\n"):
            if line.startswith(b"data: "):
                events += 1
                data = line[6:].rstrip(b"\n")
                if data != b"[DONE]":
                    orjson.loads(data)
    finally:
        resp.release()
    return events


def through_client(client: EndpointClient, payload: bytes, *, usage_only: bool, tokens: int) -> int:
    rid = uuid.uuid4().hex
    if usage_only:
        progress = Progress(Slot(Holding()), tokens, HANDOVER_S)  # what a background slot watches its stream with
        out = send_background(
            client, PATH, "completions", payload, rid.encode(), stream=True, progress=progress, max_tokens=tokens
        )
    else:
        out = send_canary(client, PATH, "completions", orjson.loads(payload), rid)
    if not out.ok or (out.usage or {}).get("completion_tokens") != tokens:
        raise SystemExit(f"request failed: {out.error_kind}: {out.error_message} usage={out.usage}")
    return tokens + 2  # token events, the usage event, [DONE]


def measure(one: Callable[[EndpointClient], int], clients: list[EndpointClient], seconds: float) -> tuple[float, float]:
    """Events per CPU-second and the CPU seconds used: one greenlet per client sending streams back to back until
    time is up. CPU is this process's, from ``time.process_time`` (nanoseconds; ``os.times`` counts 10 ms ticks,
    and 8 paced streams use well under a tenth of a CPU-second in a rep: a tick was a 15% step there)."""
    counted = [0]
    stop_at = time.perf_counter() + seconds

    def loop(client: EndpointClient) -> None:
        while time.perf_counter() < stop_at:
            events = one(client)  # not ``counted[0] += one(...)``: that reads the total before the call blocks
            counted[0] += events

    c0, t0 = time.process_time(), time.perf_counter()
    gevent.joinall([gevent.spawn(loop, c) for c in clients], raise_error=True)
    cpu = time.process_time() - c0
    if os.environ.get("BENCH_DEBUG"):
        print(f"  {len(clients)} streams: {counted[0]} events, cpu {cpu:.3f} s, wall {time.perf_counter() - t0:.2f} s")
    return (counted[0] / cpu if cpu > 0 else float("nan")), cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1 rep of 2 s per path and level")
    p.add_argument("--streams", default="8,64,256", help="concurrent streams, comma-separated")
    p.add_argument("--rate", type=float, default=50.0, help="events per second per stream")
    p.add_argument("--tokens", type=int, default=64, help="token events per stream")
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    if args.quick:
        args.reps, args.seconds = 1, 2.0
    levels = [int(s) for s in args.streams.split(",")]
    server_cpu, gen_cpu = cores()
    payload = body(args.tokens)
    print(f"command: {command_line()}")
    print(
        f"{args.tokens}-token text streams with a usage chunk, {args.rate:g} events/s per stream, all streams in "
        f"step; server on core {server_cpu}, this process on core {gen_cpu}; {args.reps} reps x {args.seconds:g} s\n"
    )
    paths: dict[str, Callable[[EndpointClient], int]] = {
        "bare parser": lambda c: bare(c, payload),
        "background (frames)": lambda c: through_client(c, payload, usage_only=True, tokens=args.tokens),
        "canary (full parse)": lambda c: through_client(c, payload, usage_only=False, tokens=args.tokens),
    }
    rows = []
    with fast_server(server_cpu, "--stream-tokens", str(args.tokens), "--rate", str(args.rate)) as (url, _):
        os.sched_setaffinity(0, {gen_cpu})
        for n in levels:
            clients = [make_client(url, connect_timeout_s=10, read_timeout_s=60, api_key=None) for _ in range(n)]
            results: dict[str, list[float]] = {name: [] for name in PATHS}
            cpus: dict[str, list[float]] = {name: [] for name in PATHS}
            for rep in range(args.reps):
                for name in PATHS if rep % 2 == 0 else PATHS[::-1]:
                    rate, cpu = measure(paths[name], clients, args.seconds)
                    results[name].append(rate)
                    cpus[name].append(cpu)
            for c in clients:
                c.close()
            base = median(results["bare parser"])
            for name in PATHS:
                per_cpu = median(results[name])
                rows.append((str(n), name, f"{per_cpu:,.0f}", f"{median(cpus[name]):.3f}", f"{per_cpu / base:.2f}x"))
            offered = n * args.rate
            print(f"{n} streams: {offered:,.0f} events/s offered", flush=True)
    print()
    print(table(["streams", "path", "events/CPU-s", "CPU s", "vs bare"], rows, [8, 22, 14, 8, 9]))
    print("\ntargets: background (frames) >= 1.50x, canary (full parse) >= 0.70x; the canary row is also the old")
    print("background path (every event decoded and parsed), so background/canary is the new path's gain over it")


if __name__ == "__main__":
    main()
