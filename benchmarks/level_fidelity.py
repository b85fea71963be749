"""Level fidelity: does the engine see the concurrency each level claims while that level's canaries run?

Why: a level's determinism figures mean "under N concurrent requests" only if N requests were
really in the engine's batch or queue. This script starts the embedded engine, scrapes its
``/metrics`` every 100 ms in a thread (``vllm:num_requests_running`` + ``vllm:num_requests_waiting``),
runs a real headless ``loadgen run`` of the quickstart scenario against it, and per level compares
the target (the level's background users plus the canary itself) with what the engine reported
while that level's canaries were in flight (each sweep canary's ``[sent_at, sent_at + latency_s]``
window from ``canaries.jsonl``). Engine and generator share this machine's cores, as they would in
a laptop run.

Run: ``python benchmarks/level_fidelity.py [--quick] [--levels 0,1,4,16,32] [--canaries-per-level 6]``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import orjson
from harness import REPO, command_line, median, pct, table

from loadgen.launchers.process import start_embedded

GAUGE = re.compile(rb"^vllm:num_requests_(running|waiting)(?:\{[^}]*\})? ([0-9.eE+-]+)$", re.MULTILINE)


class Scraper(threading.Thread):
    """Reads the engine's running and waiting gauges every ``every_s`` into ``samples``."""

    def __init__(self, url: str, every_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.url, self.every_s = url.rstrip("/") + "/metrics", every_s
        self.samples: list[tuple[float, float, float]] = []  # (epoch, running, waiting)
        self.failures = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.time()
            try:
                with urllib.request.urlopen(self.url, timeout=2) as resp:
                    text = resp.read()
            except OSError:
                self.failures += 1
            else:
                found = {m.group(1).decode(): float(m.group(2)) for m in GAUGE.finditer(text)}
                if "running" in found:
                    self.samples.append((t, found["running"], found.get("waiting", 0.0)))
            self.stop.wait(max(0.0, self.every_s - (time.time() - t)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="3 canaries per level")
    p.add_argument("--levels", default="0,1,4,16,32")
    p.add_argument("--canaries-per-level", type=int, default=6)
    args = p.parse_args()
    if args.quick:
        args.canaries_per_level = 3
    print(f"command: {command_line()}")
    with tempfile.TemporaryDirectory(prefix="bench-fidelity-") as tmp_:
        tmp = Path(tmp_)
        with start_embedded([], log_path=tmp / "engine.log") as engine:
            scraper = Scraper(engine.url)
            scraper.start()
            cmd = [
                sys.executable,
                "-m",
                "loadgen",
                "run",
                "quickstart",
                "--host",
                engine.url,
                "--levels",
                args.levels,
                "--canaries-per-level",
                str(args.canaries_per_level),
                "--out",
                str(tmp / "runs"),
                "--no-report",
            ]
            started = time.monotonic()
            out = subprocess.run(cmd, check=True, cwd=REPO, capture_output=True)
            took = time.monotonic() - started
            scraper.stop.set()
            scraper.join()
        run_dir = Path(out.stdout.decode().strip().splitlines()[-1])
        rows = [orjson.loads(line) for line in (run_dir / "canaries.jsonl").read_bytes().splitlines()]
    print(
        f"embedded engine, quickstart canary; run took {took:.0f} s; {len(scraper.samples)} scrapes every 100 ms "
        f"({scraper.failures} failed)\n"
    )
    table_rows = []
    for level in [int(x) for x in args.levels.split(",")]:
        mine = [r for r in rows if r["phase"] == "sweep" and r["level"] == level and r.get("latency_s") is not None]
        windows = [(r["sent_at"], r["sent_at"] + r["latency_s"]) for r in mine]
        seen = [run + wait for t, run, wait in scraper.samples if any(a <= t <= b for a, b in windows)]
        running = [run for t, run, _ in scraper.samples if any(a <= t <= b for a, b in windows)]
        target = level + 1
        at_target = sum(1 for s in seen if s >= target) / len(seen) if seen else float("nan")
        sent_inflight = median([float(r["inflight_at_send"]) for r in mine])
        spread = [f"{pct(seen, 0.1):g}", f"{median(seen):g}", f"{pct(seen, 0.9):g}", f"{median(running):g}"]
        table_rows.append((level, target, len(mine), len(seen), *spread, f"{at_target:.0%}", f"{sent_inflight:g}"))
    header = [
        "level",
        "target",
        "canaries",
        "scrapes",
        "p10",
        "median",
        "p90",
        "running med",
        ">=target",
        "gen inflight",
    ]
    print(table(header, table_rows))
    print("\ntarget = background users + the canary; p10/median/p90 = engine running + waiting during the level's")
    print("canaries; 'gen inflight' = the generator's own in-flight count at canary send (canary excluded), median")


if __name__ == "__main__":
    main()
