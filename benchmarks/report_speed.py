"""Benchmark: how fast is the report on a big run, and how much memory does the analysis take?

Generates a synthetic run in memory (N canary records x T tokens, token ids int32, logprobs and
top-1/top-2 gaps float64), analyses it through the same entry point as ``loadgen report``
(``reports.analysis.canary.analyse``), and prints time and peak memory against the token array size.
Then writes a JSONL run folder of a smaller size and times ``load_run`` plus the report on it.

    python benchmarks/report_speed.py                 # 1,000,000 x 128 in memory; 50,000-record folder
    python benchmarks/report_speed.py --records 100000 --folder-records 10000

Target: 1,000,000 x 128 analysed in under 10 s, analysis memory at most twice the token array.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import orjson
import pandas as pd  # type: ignore[import-untyped]

from collectors.read.runfolder import CanaryColumns, load_run
from reports.analysis.build import build_report
from reports.analysis.canary import analyse
from reports.model.report import CanaryAnalysis

LEVELS = (0, 1, 2, 4, 8, 16, 32, 64)


def synthetic(n: int, t: int, seed: int = 0) -> CanaryColumns:
    """One canary, N sweep records over LEVELS; busier levels diverge more, at a few fork points."""
    rng = np.random.default_rng(seed)
    ref = rng.integers(0, 50_000, t, dtype=np.int32)
    ids = np.broadcast_to(ref, (n, t)).copy()
    level = np.array(LEVELS)[np.arange(n) % len(LEVELS)]
    p_div = np.minimum(0.9, level / 64)
    diverge = rng.random(n) < p_div
    forks = np.array([3, 17, 40, 41, 77, 102, 103, 120])
    at = forks[rng.integers(0, len(forks), n)]
    tail = rng.integers(0, 50_000, (64, t), dtype=np.int32)  # 64 distinct tails
    which = rng.integers(0, 64, n)
    mask = diverge[:, None] & (np.arange(t) >= at[:, None])
    ids[mask] = tail[which][mask]
    lp = np.broadcast_to(-rng.random(t), (n, t)).copy()
    lp[diverge] += rng.normal(0, 1e-6, (int(diverge.sum()), t))
    gap = np.broadcast_to(rng.random(t) * 3, (n, t)).copy()
    frame = pd.DataFrame(
        {
            "canary_id": np.full(n, "c0", dtype=object),
            "request_id": np.array([f"r{i}" for i in range(n)], dtype=object),
            "phase": np.full(n, "sweep", dtype=object),
            "level": level.astype(np.int64),
            "inflight_at_send": level.astype(np.int64),
            "sent_at": 1.7e9 + np.arange(n, dtype=np.float64) * 1e-3,
            "status": np.full(n, "ok", dtype=object),
            "latency_s": rng.random(n),
            "error_kind": np.full(n, None, dtype=object),
            "engine_running": level.astype(np.float64),
            "text": np.full(n, None, dtype=object),
            "n_ids": np.full(n, t, dtype=np.int64),
            "n_tokens": np.full(n, -1, dtype=np.int64),
            "n_logprobs": np.full(n, t, dtype=np.int64),
        }
    )
    return CanaryColumns(frame, ids, np.zeros((n, 0), np.int32), np.empty(0, dtype=object), lp, gap)


def time_analysis(cols: CanaryColumns) -> tuple[float, int, list[CanaryAnalysis]]:
    t0 = time.perf_counter()
    out = analyse(cols, list(LEVELS))
    elapsed = time.perf_counter() - t0
    tracemalloc.start()
    tracemalloc.reset_peak()
    analyse(cols, list(LEVELS))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return elapsed, peak, out


def write_folder(run_dir: Path, cols: CanaryColumns) -> None:
    f = cols.frame
    manifest = {"schema": 1, "run_id": "bench", "levels": list(LEVELS), "status": "finished", "endpoint": {}}
    (run_dir / "manifest.json").write_bytes(orjson.dumps(manifest))
    with open(run_dir / "canaries.jsonl", "wb") as fh:
        for i in range(cols.n):
            row = {
                "schema": 1,
                "run_id": "bench",
                "canary_id": "c0",
                "request_id": f"r{i}",
                "phase": "sweep",
                "level": int(f["level"].iat[i]),
                "inflight_at_send": int(f["inflight_at_send"].iat[i]),
                "sent_at": float(f["sent_at"].iat[i]),
                "status": "ok",
                "latency_s": float(f["latency_s"].iat[i]),
                "token_ids": cols.token_ids[i],
                "tokens": [f"w{x}" for x in cols.token_ids[i].tolist()],
                "logprobs": cols.logprobs[i],
                "top_logprobs": [[["a", -0.1], ["b", -0.1 - g]] for g in cols.top_gap[i].tolist()],
            }
            fh.write(orjson.dumps(row, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--folder-records", type=int, default=50_000)
    args = ap.parse_args()

    cols = synthetic(args.records, args.tokens)
    tok_bytes = cols.token_ids.nbytes
    elapsed, peak, out = time_analysis(cols)
    o = out[0]["overall"]
    print("| case | records x tokens | token array | time | peak analysis memory | peak / token array |")
    print("|---|---|---:|---:|---:|---:|")
    print(
        f"| analysis, in memory | {args.records:,} x {args.tokens} | {tok_bytes / 2**20:,.0f} MiB | {elapsed:.2f} s "
        f"| {peak / 2**20:,.0f} MiB | {peak / tok_bytes:.2f} |"
    )
    del cols
    small = synthetic(args.folder_records, args.tokens, seed=1)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        write_folder(run_dir, small)
        size = (run_dir / "canaries.jsonl").stat().st_size
        t0 = time.perf_counter()
        run = load_run(run_dir)
        t_load = time.perf_counter() - t0
        t0 = time.perf_counter()
        build_report(run)
        t_report = time.perf_counter() - t0
    print(
        f"| read JSONL folder ({size / 2**20:,.0f} MiB) | {args.folder_records:,} x {args.tokens} | "
        f"{run.canaries.token_ids.nbytes / 2**20:,.0f} MiB | {t_load:.2f} s | — | — |"
    )
    print(f"| report on that folder | {args.folder_records:,} x {args.tokens} | — | {t_report:.2f} s | — | — |")
    print(f"\nsanity: {o['unique_completions']} unique completions, {o['diverged']} diverged of {o['completions']}")


if __name__ == "__main__":
    main()
