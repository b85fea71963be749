"""What the step trace costs the embedded engine: scheduler steps per second with and without it.

Why this script exists: the trace is written inside the engine thread before every forward step, so its cost
is paid by every request; this measures it where it is paid, on the scheduler itself (no HTTP), alternating
the two settings (and which goes first) so that a busy machine slows both alike; the figure is the median of
each round's ratio. Each round runs the same requests (random prompts of
8-64 tokens, greedy, 32 tokens, ``--concurrency`` in flight) to completion on a fresh scheduler. A step is tens
of milliseconds of numpy, so the difference drowns in a shared machine's noise; the record alone (built from
``--concurrency`` rows and written) is timed too, the figure to set against a step's time.

    python benchmarks/step_trace_cost.py [--rounds 5] [--requests 64] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from loadgen.engine.runner import EngineOptions, build_scheduler
from loadgen.engine.sampling import SamplingParams
from loadgen.engine.scheduler import EngineRequest
from loadgen.engine.steplog import open_step_trace, step_record


def steps_per_s(trace: Path | None, requests: int, concurrency: int, seed: int) -> tuple[float, int]:
    """Steps per second of one round, and the steps it took."""
    sched = build_scheduler(EngineOptions(max_num_seqs=concurrency, step_trace=trace))
    rnd = random.Random(seed)
    vocab = sched.tokenizer.vocab_size
    params = SamplingParams(max_tokens=32, temperature=0, ignore_eos=True)
    for i in range(requests):
        prompt = [rnd.randrange(300, vocab) for _ in range(rnd.randint(8, 64))]
        sched.add(EngineRequest(f"cmpl-{i:032x}-0", prompt, params))
    t0 = time.perf_counter()
    while sched.has_work:
        sched.step()
    elapsed = time.perf_counter() - t0
    if sched.trace is not None:
        sched.trace.close()
    return sched.stats.steps_total / elapsed, sched.stats.steps_total


def record_us(folder: Path, rows: int, records: int = 20_000) -> float:
    """Microseconds to build and write one record of ``rows`` decode rows."""
    sched = build_scheduler(EngineOptions(max_num_seqs=rows))
    params = SamplingParams(max_tokens=32, temperature=0)
    for i in range(rows):
        sched.add(EngineRequest(f"cmpl-{i:032x}-0", list(range(300, 340)), params))
    sched.step()  # every request prefilled: each is a decode row from here on
    decoding = list(sched.running.values())
    writer = open_step_trace(folder)
    assert writer is not None
    t0 = time.perf_counter()
    for step in range(records):
        writer.write(step_record(step, decoding, []))
    elapsed = time.perf_counter() - t0
    writer.close()
    return elapsed / records * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()
    off: list[float] = []
    on: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        for r in range(args.rounds):
            pair: list[tuple[Path | None, list[float]]] = [(None, off), (Path(folder), on)]
            for trace, rates in reversed(pair) if r % 2 else pair:
                rate, steps = steps_per_s(trace, args.requests, args.concurrency, r)
                rates.append(rate)
        lines = sum(1 for f in Path(folder).glob("engine_steps*.jsonl") for _ in f.open("rb"))
        alone = record_us(Path(folder) / "alone", args.concurrency)
    print(f"{args.rounds} rounds of {args.requests} requests, {args.concurrency} in flight, {steps} steps a round")
    print(f"without the trace: {statistics.median(off):8.1f} steps/s (median; {min(off):.1f}-{max(off):.1f})")
    print(f"with the trace:    {statistics.median(on):8.1f} steps/s (median; {min(on):.1f}-{max(on):.1f})")
    ratios = [b / a for a, b in zip(off, on, strict=True)]
    print(
        f"with / without, paired by round: median {statistics.median(ratios):.3f}x "
        f"({min(ratios):.2f}-{max(ratios):.2f}; {lines} lines written)"
    )
    step_ms = 1e3 / statistics.median(off)
    share = alone / 10 / step_ms
    print(f"one record of {args.concurrency} rows, built and written: {alone:.1f} us ({share:.3f}% of a step)")


if __name__ == "__main__":
    main()
