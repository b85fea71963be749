"""A worker's resident memory over a long run: records go to disk, so RSS must stay flat.

Why: an hour-long sweep sends millions of background requests; anything kept per request (a list
of records, an unbounded stats table) would grow the Locust process until it swaps and stops being
a steady load. This script runs a real headless ``loadgen run`` against the fast server (server and
generator on separate cores) for ``--seconds``, samples the Locust process's RSS with psutil every
second, interrupts the run (SIGINT, as Ctrl-C would), and prints RSS against requests completed.

Run: ``python benchmarks/memory_flat.py [--quick] [--seconds 90] [--users 64]``.
"""

from __future__ import annotations

import argparse
import bisect
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from generator_ceiling import SCENARIO
from harness import REPO, Sampler, command_line, cores, fast_server, table

SETTLE_S = 5.0  # the first sample counted as "start": imports done, users spawned, buffers warm


def completion_times(run_dir: Path) -> list[float]:
    times = []
    for name in ("canaries.jsonl", "background.jsonl"):
        for line in (run_dir / name).read_bytes().splitlines():
            row = orjson.loads(line)
            if row.get("latency_s") is not None:
                times.append(float(row["sent_at"]) + float(row["latency_s"]))
    return sorted(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a 35 s run")
    p.add_argument("--seconds", type=float, default=90.0)
    p.add_argument("--users", type=int, default=64)
    args = p.parse_args()
    if args.quick:
        args.seconds = 35.0
    server_cpu, gen_cpu = cores()
    print(f"command: {command_line()}")
    print(f"{args.users} background users + 1 canary user against the fast server for {args.seconds:g} s\n")
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp_, fast_server(server_cpu) as (url, _):
        tmp = Path(tmp_)
        scenario = tmp / "memory.toml"
        scenario.write_text(SCENARIO.format(users=args.users, stream="false"))
        cmd = [
            sys.executable,
            "-m",
            "loadgen",
            "run",
            str(scenario),
            "--host",
            url,
            "--levels",
            str(args.users),
            "--canaries-per-level",
            "100000000",
            "--out",
            str(tmp / "runs"),
            "--no-report",
        ]
        pin = lambda: os.sched_setaffinity(0, {gen_cpu})  # noqa: E731
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, cwd=REPO, preexec_fn=pin)
        with Sampler(proc.pid, child_marker="locust", every_s=1.0) as sampler:
            time.sleep(args.seconds)
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=120)
        run_dir = next((tmp / "runs").iterdir())
        done = completion_times(run_dir)
    samples = [s for s in sampler.samples if s.t >= sampler.samples[0].t + SETTLE_S]
    if len(samples) < 5:
        raise SystemExit(f"too few RSS samples ({len(samples)}): was the Locust process found?")
    picks = [samples[round(i * (len(samples) - 1) / 4)] for i in range(5)]
    t0 = sampler.samples[0].t
    rows = [(f"{s.t - t0:.0f}", f"{bisect.bisect_right(done, s.t):,}", f"{s.rss_bytes / 2**20:.1f}") for s in picks]
    print(table(["t s", "requests done", "RSS MiB"], rows, [8, 16, 10]))
    first, last = picks[0], picks[-1]
    n = bisect.bisect_right(done, last.t) - bisect.bisect_right(done, first.t)
    growth = last.rss_bytes - first.rss_bytes
    print(
        f"\nRSS {first.rss_bytes / 2**20:.1f} -> {last.rss_bytes / 2**20:.1f} MiB over {n:,} requests "
        f"({growth / max(n, 1):+.1f} bytes/request); peak {max(s.rss_bytes for s in samples) / 2**20:.1f} MiB"
    )


if __name__ == "__main__":
    main()
