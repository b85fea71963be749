"""Measurements of the embedded engine over real HTTP: throughput, rate curve, and the D3 2x2.

Why this script exists: speed targets and measured curves belong in a script that prints a
table, not in timed unit tests. Every figure here comes from a real ``python -m loadgen.engine``
process on port 0 driven by aiohttp streaming clients on the same machine.

    python benchmarks/engine_throughput.py throughput [--seconds 10] [--streams 1 8 32]
    python benchmarks/engine_throughput.py curve [--levels 0 1 2 4 8 16 32 64] [--canaries 12]
    python benchmarks/engine_throughput.py d3 [--boots 6] [--requests 6]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import orjson

from loadgen.engine.prompts import CURVE_CANARY, D3_LONG_PROMPT, D3_MAX_TOKENS, D3_SHORT_PROMPT

WORDS = [
    "the",
    "old",
    "man",
    "sea",
    "river",
    "house",
    "light",
    "story",
    "night",
    "town",
    "water",
    "boat",
    "song",
    "morning",
    "children",
    "king",
]


@contextlib.contextmanager
def engine(*flags: str) -> Iterator[str]:
    """A fresh engine process; yields its base URL, stops it with SIGTERM."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen.engine", "--port", "0", *flags],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.startswith("READY "):
            raise RuntimeError(f"engine did not start: {line!r}")
        yield line.split(" ", 1)[1]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def sse_events(resp: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    buffer = b""
    async for data in resp.content.iter_any():
        buffer += data
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            payload = event.removeprefix(b"data: ")
            if payload == b"[DONE]":
                return
            yield orjson.loads(payload)


async def stream_completion(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> list[int]:
    """Token ids of one streamed completion."""
    ids: list[int] = []
    async with session.post(f"{url}/v1/completions", json={**body, "stream": True, "return_token_ids": True}) as r:
        r.raise_for_status()
        async for chunk in sse_events(r):
            for choice in chunk["choices"]:
                ids.extend(choice.get("token_ids") or [])
    return ids


def background_body(rnd: random.Random, max_tokens: int) -> dict[str, Any]:
    prompt = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(4, 80)))
    return {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}


async def _throughput_level(url: str, streams: int, seconds: float) -> float:
    deadline = time.perf_counter() + seconds
    counts = [0] * streams

    async def client(i: int, session: aiohttp.ClientSession) -> None:
        rnd = random.Random(i)
        while time.perf_counter() < deadline:
            counts[i] += len(await stream_completion(session, url, background_body(rnd, 128)))

    start = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(client(i, session) for i in range(streams)))
    return sum(counts) / (time.perf_counter() - start)


def throughput(args: argparse.Namespace) -> None:
    print("| concurrent streams | generated tokens/s |")
    print("|---:|---:|")
    with engine() as url:
        asyncio.run(_throughput_level(url, 4, 2.0))
        for n in args.streams:
            rate = asyncio.run(_throughput_level(url, n, args.seconds))
            print(f"| {n} | {rate:,.0f} |", flush=True)


async def _curve_level(url: str, level: int, canaries: int, max_tokens: int) -> list[tuple[int, ...]]:
    stop = asyncio.Event()

    async def background(i: int, session: aiohttp.ClientSession) -> None:
        rnd = random.Random(1000 + i)
        while not stop.is_set():
            await stream_completion(session, url, background_body(rnd, rnd.randint(8, 160)))

    canary = {"prompt": CURVE_CANARY, "max_tokens": max_tokens, "temperature": 0, "seed": 0, "top_p": 1}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = [asyncio.create_task(background(i, session)) for i in range(level)]
        await asyncio.sleep(0.5 if level else 0)
        outs = []
        for _ in range(canaries):
            outs.append(tuple(await stream_completion(session, url, canary)))
            await asyncio.sleep(random.random() * 0.05)
        stop.set()
        await asyncio.gather(*tasks)
    return outs


def curve(args: argparse.Namespace) -> None:
    flags = ["--logit-scale", str(args.logit_scale)]
    print(f"logit scale {args.logit_scale}; canary max_tokens {args.max_tokens}; {args.canaries} canaries per level")
    print("| background streams | canaries | unique completions | diverged from alone |")
    print("|---:|---:|---:|---:|")
    with engine(*flags) as url:
        reference = asyncio.run(_curve_level(url, 0, 3, args.max_tokens))
        for level in args.levels:
            outs = asyncio.run(_curve_level(url, level, args.canaries, args.max_tokens))
            diverged = sum(o != reference[-1] for o in outs)
            print(f"| {level} | {len(outs)} | {len(set(outs))} | {diverged} |", flush=True)


async def _six(url: str, prompt: str, n: int) -> list[tuple[int, ...]]:
    body = {"prompt": prompt, "max_tokens": D3_MAX_TOKENS, "temperature": 0, "seed": 0}
    async with aiohttp.ClientSession() as session:
        return [tuple(await stream_completion(session, url, body)) for _ in range(n)]


def first_differs_rest_agree(outs: list[tuple[int, ...]]) -> bool:
    return len(set(outs[1:])) == 1 and outs[0] != outs[1]


def d3(args: argparse.Namespace) -> None:
    cells = [
        ("prefix caching on, invariant off", []),
        ("prefix caching off, invariant off", ["--no-enable-prefix-caching"]),
        ("prefix caching on, invariant on", ["--batch-invariant"]),
        ("prefix caching off, invariant on", ["--no-enable-prefix-caching", "--batch-invariant"]),
    ]
    print(f"{args.boots} fresh boots per cell, {args.requests} one-at-a-time requests per prompt per boot")
    print("| cell | short prompt: first differs, rest agree | long prompt | distinct completions (short) |")
    print("|---|---:|---:|---:|")
    for name, flags in cells:
        short_hits = long_hits = 0
        distinct: set[tuple[int, ...]] = set()
        for _ in range(args.boots):
            with engine(*flags) as url:
                short = asyncio.run(_six(url, D3_SHORT_PROMPT, args.requests))
                long = asyncio.run(_six(url, D3_LONG_PROMPT, args.requests))
            short_hits += first_differs_rest_agree(short)
            long_hits += first_differs_rest_agree(long)
            distinct.update(short)
        print(f"| {name} | {short_hits} / {args.boots} | {long_hits} / {args.boots} | {len(distinct)} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--seconds", type=float, default=10.0)
    t.add_argument("--streams", type=int, nargs="+", default=[1, 8, 32])
    c = sub.add_parser("curve")
    c.add_argument("--levels", type=int, nargs="+", default=[0, 1, 2, 4, 8, 16, 32, 64])
    c.add_argument("--canaries", type=int, default=12)
    c.add_argument("--max-tokens", type=int, default=64)
    c.add_argument("--logit-scale", type=float, default=4.0)
    d = sub.add_parser("d3")
    d.add_argument("--boots", type=int, default=6)
    d.add_argument("--requests", type=int, default=6)
    args = parser.parse_args()
    {"throughput": throughput, "curve": curve, "d3": d3}[args.cmd](args)


if __name__ == "__main__":
    main()
