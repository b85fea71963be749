"""What the vLLM step-trace plugin costs a real engine: steps/s and tokens/s with the trace on and off.

Why this script exists: the plugin (``loadgen.plugins.vllm_steps``) runs inside vLLM's scheduler on every step,
so its cost is paid by every request of a traced engine; issue 52 asks for it on the GPU, under 2%. Two servers
of the same model and flags run side by side, one started with ``LOADGEN_STEP_TRACE`` (on), one without (off).
Rounds alternate which one is loaded first; each round sends the same seeded requests (random token-id prompts,
greedy, ``ignore_eos`` so every request decodes its full length) at a fixed concurrency to one server, then the
other, and times them. Steps come from vLLM's own ``vllm:iteration_tokens_total`` histogram count (one
observation per engine step), read before and after each load; the trace's lines and bytes per step come from
the on-server's trace folder. The figure is the median over rounds of each round's on/off ratio.

Runs on the GPU machine (aiohttp only; no project import, so it runs beside any install):

    python3 benchmarks/vllm_why/trace_cost.py --on http://127.0.0.1:8100 --off http://127.0.0.1:8101 \
        --trace /tmp/cost-trace [--rounds 6] [--requests 256] [--concurrency 64] [--out cost.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import time
from pathlib import Path

import aiohttp

STEPS = re.compile(r"^vllm:iteration_tokens_total_count\{[^}]*\}\s+([0-9.e+]+)", re.M)


async def steps(session: aiohttp.ClientSession, base: str) -> float | None:
    """The engine's step count so far (None where this vLLM has no such histogram)."""
    async with session.get(f"{base}/metrics") as r:
        found = STEPS.findall(await r.text())
    return sum(float(v) for v in found) if found else None


async def load(
    session: aiohttp.ClientSession, base: str, model: str, prompts: list[list[int]], out_tokens: int, concurrency: int
) -> tuple[float, int]:
    """Seconds to answer every prompt with ``concurrency`` in flight, and the tokens generated."""
    queue = list(prompts)
    generated = 0

    async def worker() -> None:
        nonlocal generated
        while queue:
            prompt = queue.pop()
            body = {"model": model, "prompt": prompt, "max_tokens": out_tokens, "temperature": 0, "ignore_eos": True}
            async with session.post(f"{base}/v1/completions", json=body) as r:
                r.raise_for_status()
                generated += (await r.json())["usage"]["completion_tokens"]

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - t0, generated


def num(value: object) -> float:
    """A figure of a round's row (the rows also hold names and missing step counts)."""
    assert isinstance(value, int | float), value
    return float(value)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--on", required=True, help="base URL of the server started with LOADGEN_STEP_TRACE")
    ap.add_argument("--off", required=True, help="base URL of the same server without it")
    ap.add_argument("--trace", type=Path, required=True, help="the on-server's LOADGEN_STEP_TRACE folder")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, nargs=2, default=(64, 1024))
    ap.add_argument("--out-tokens", type=int, default=128)
    ap.add_argument("--max-token-id", type=int, default=8000, help="prompt ids are drawn from 100 up to this")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    rnd = random.Random(0)
    prompts = [
        [rnd.randrange(100, a.max_token_id) for _ in range(rnd.randint(*a.prompt_tokens))] for _ in range(a.requests)
    ]
    rows = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        async with session.get(f"{a.on}/v1/models") as r:
            model = (await r.json())["data"][0]["id"]
        for url in (a.on, a.off):  # one warm-up round each, not counted
            await load(session, url, model, prompts[: a.concurrency], a.out_tokens, a.concurrency)
        for i in range(a.rounds):
            order = [("on", a.on), ("off", a.off)] if i % 2 == 0 else [("off", a.off), ("on", a.on)]
            row: dict[str, float | int | str | None] = {"round": i, "first": order[0][0]}
            for name, url in order:
                s0 = await steps(session, url)
                secs, toks = await load(session, url, model, prompts, a.out_tokens, a.concurrency)
                s1 = await steps(session, url)
                row[f"{name}_s"] = round(secs, 3)
                row[f"{name}_tokens_per_s"] = round(toks / secs, 1)
                row[f"{name}_steps"] = None if s0 is None or s1 is None else int(s1 - s0)
                row[f"{name}_steps_per_s"] = None if s0 is None or s1 is None else round((s1 - s0) / secs, 1)
            row["tokens_ratio"] = round(num(row["on_tokens_per_s"]) / num(row["off_tokens_per_s"]), 4)
            if row["on_steps_per_s"] and row["off_steps_per_s"]:
                row["steps_ratio"] = round(num(row["on_steps_per_s"]) / num(row["off_steps_per_s"]), 4)
            rows.append(row)
            print(json.dumps(row), flush=True)
    files = sorted(a.trace.glob("*.jsonl"))
    lines = sum(sum(1 for _ in f.open("rb")) for f in files)
    size = sum(f.stat().st_size for f in files)
    summary = {
        "rounds": a.rounds,
        "requests": a.requests,
        "concurrency": a.concurrency,
        "out_tokens": a.out_tokens,
        "prompt_tokens": list(a.prompt_tokens),
        "median_tokens_ratio": statistics.median(num(r["tokens_ratio"]) for r in rows),
        "median_steps_ratio": statistics.median(num(r["steps_ratio"]) for r in rows)
        if all("steps_ratio" in r for r in rows)
        else None,
        "median_on_tokens_per_s": statistics.median(num(r["on_tokens_per_s"]) for r in rows),
        "median_off_tokens_per_s": statistics.median(num(r["off_tokens_per_s"]) for r in rows),
        "trace_files": len(files),
        "trace_lines": lines,
        "trace_bytes": size,
        "bytes_per_step": round(size / lines, 1) if lines else None,
        "rows": rows,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1))
    if a.out:
        a.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
