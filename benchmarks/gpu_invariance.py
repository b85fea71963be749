"""The GPU backend in-process: does the canary match itself under batching, and what does invariance cost?

Why this script exists: the issue asks for the batch-invariant mode's throughput against the
default mode, measured, and for proof that it closes the divergence. This drives
``GpuScheduler.step`` directly (no HTTP, so the figures are the engine's own), on one model
shared by both modes:

- determinism: a fixed greedy canary alone, then among K background requests of varied prompt
  and output lengths (so the batch changes under it); tokens and logprobs compared bitwise
  with the canary alone;
- throughput: N identical-shape requests at once, generated tokens per second, per mode.

Needs a CUDA device, torch and transformers (``--backend gpu``'s requirements).

    python benchmarks/gpu_invariance.py [--out results.json] [--canary-tokens 128]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from loadgen.engine.gpu.build import build_gpu_scheduler
from loadgen.engine.gpu.model import to_host
from loadgen.engine.gpu.scheduler import GpuScheduler
from loadgen.engine.runner import EngineOptions
from loadgen.engine.sampling import SamplingParams
from loadgen.engine.scheduler import EngineRequest

CANARY = "Tell me about Richard Feynman and the lighthouse keeper who found a strange stone on the shore"


@dataclass(frozen=True)
class Completion:
    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]


def drain(sched: GpuScheduler, reqs: list[EngineRequest]) -> tuple[dict[str, Completion], float, int]:
    """Submit all, step until idle; completions by id, wall seconds and generated tokens."""
    toks: dict[str, list[int]] = defaultdict(list)  # also requests added before this call
    lps: dict[str, list[float]] = defaultdict(list)
    for r in reqs:
        sched.add(r)
    t0 = time.perf_counter()
    generated = 0
    while sched.has_work:
        for d in sched.step():
            for e in d.events:
                toks[d.request_id].append(e.token_id)
                lps[d.request_id].append(e.logprob if e.logprob is not None else float("nan"))
                generated += 1
    wall = time.perf_counter() - t0
    return {k: Completion(tuple(toks[k]), tuple(lps[k])) for k in toks}, wall, generated


def request(rid: str, ids: list[int], max_tokens: int) -> EngineRequest:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, logprobs=1, seed=0)
    return EngineRequest(rid, ids, params)


def background(rng: random.Random, n: int, vocab: int, max_tokens: int) -> list[EngineRequest]:
    out = []
    for i in range(n):
        ids = [rng.randrange(1, vocab) for _ in range(rng.randint(8, 300))]
        out.append(request(f"bg{i}", ids, rng.randint(16, max_tokens)))
    return out


def determinism(
    sched: GpuScheduler, canary: list[int], tokens: int, levels: list[int], reps: int
) -> list[dict[str, object]]:
    alone, _, _ = drain(sched, [request("canary", canary, tokens)])
    ref = alone["canary"]
    rows: list[dict[str, object]] = []
    rng = random.Random(7)
    vocab = sched.gpu.vocab_size
    for k in levels:
        for rep in range(reps):
            reqs = background(rng, k, vocab, 2 * tokens)
            # the canary arrives mid-stream: first a step with the background alone
            for r in reqs:
                sched.add(r)
            if reqs:
                sched.step()
            done, _, _ = drain(sched, [request("canary", canary, tokens)])
            got = done["canary"]
            first = next((i for i, (a, b) in enumerate(zip(got.tokens, ref.tokens, strict=True)) if a != b), None)
            rows.append(
                {
                    "background": k,
                    "rep": rep,
                    "tokens_equal": got.tokens == ref.tokens,
                    "logprobs_bitwise_equal": got.logprobs == ref.logprobs,
                    "first_divergence": first,
                }
            )
    return rows


def throughput(sched: GpuScheduler, sizes: list[int], tokens: int) -> list[dict[str, float]]:
    rows = []
    rng = random.Random(3)
    vocab = sched.gpu.vocab_size
    for n in sizes:
        reqs = [request(f"t{i}", [rng.randrange(1, vocab) for _ in range(64)], tokens) for i in range(n)]
        _, wall, generated = drain(sched, reqs)
        rows.append(
            {"requests": float(n), "tokens": float(generated), "seconds": wall, "tokens_per_s": generated / wall}
        )
    return rows


def step_ms(sched: GpuScheduler, batch: int, steps: int = 30) -> float:
    """Milliseconds per decode forward of ``batch`` rows at position 64 (host round trip included)."""
    slots = list(range(batch))
    for _ in range(3):
        to_host(sched.gpu.forward(slots, [[5]] * batch, [64] * batch, 65))
    t0 = time.perf_counter()
    for _ in range(steps):
        to_host(sched.gpu.forward(slots, [[5]] * batch, [64] * batch, 65))
    return 1000 * (time.perf_counter() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--canary-tokens", type=int, default=128)
    ap.add_argument("--levels", type=int, nargs="+", default=[0, 1, 7, 31, 127])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 32, 128])
    ap.add_argument("--throughput-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3, help="canary runs per background level")
    args = ap.parse_args()
    opts = EngineOptions(max_num_seqs=128, max_model_len=512, max_num_batched_tokens=8192)
    default = build_gpu_scheduler(opts)
    # same model and KV buffers, one mode at a time
    invariant = GpuScheduler(default.gpu, default.tokenizer, 128, 8192, invariant=True)
    canary = default.tokenizer.encode(CANARY)
    drain(default, [request("warm", canary, 8)])
    drain(invariant, [request("warm", canary, 8)])
    result: dict[str, object] = {"step_ms": {str(b): step_ms(default, b) for b in (1, 8, 32, 128)}}
    print("decode forward ms by batch rows:", result["step_ms"], flush=True)
    for name, sched in (("default", default), ("invariant", invariant)):
        det = determinism(sched, canary, args.canary_tokens, args.levels, args.reps)
        thr = throughput(sched, args.sizes, args.throughput_tokens)
        result[name] = {"determinism": det, "throughput": thr}
        print(f"## {name}", flush=True)
        print("| background | rep | tokens equal | logprobs bitwise equal | first divergence |")
        print("|---:|---:|---|---|---:|")
        for r in det:
            row = [r["background"], r["rep"], r["tokens_equal"], r["logprobs_bitwise_equal"], r["first_divergence"]]
            print("| " + " | ".join(str(x) for x in row) + " |")
        print("| requests | tokens | seconds | tokens/s |")
        print("|---:|---:|---:|---:|")
        for t in thr:
            print(f"| {t['requests']:.0f} | {t['tokens']:.0f} | {t['seconds']:.2f} | {t['tokens_per_s']:.0f} |")
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
