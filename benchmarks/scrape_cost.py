"""Per-server scraping cost: the generator's requests/s with one scraped endpoint vs two scraped servers, side by side.

Why: a prefill/decode run scrapes every server behind the router instead of the endpoint (docs/design.md,
"Prefill/decode: servers behind one endpoint"): one ``/metrics`` scraper thread per server in the run's owner
process, which shares the generator's core. The extra scraping must cost the generator under 5% of its ceiling.

Against ``fastserver.py`` answering ``/metrics`` with a real vLLM 0.26 exposition (51 KB, an H200 under load;
``tests/loadgen/core/wire/fixtures/vllm-0.26-h200/default-metrics-busy.txt``, its running gauge raised above any
level so the held-level gate never waits on it), pinned to one core, this script
alternates, in one run, the same headless ``loadgen run`` (``generator_ceiling.py``'s scenario and count: every
recorded request completing in the steady window) in two variants, pinned together to the other core:

- ``one endpoint``: no servers listed, so the run scrapes the endpoint's ``/metrics`` (every 50 ms);
- ``two servers``: ``[[endpoint.servers]]`` lists a prefill and a decode server (both the same fast server), so
  the run scrapes two of them instead, each every 50 ms, and the held-level gate asks the decode side's.

It prints each run: requests/s, the CPU of Locust and of the run's owner (where the scrapers run), and
requests per generator CPU-second (owner and Locust together: the generator's ceiling on a core of its own,
which other work on a shared machine moves far less than requests/s). Then the medians of both, the ratios
two / one (of the medians, and the median of each alternated pair's), and the owner's extra CPU as a share of
a core. Target: two / one >= 0.95 per generator CPU-second, the extra scraping costing under 5%.

Run: ``python benchmarks/scrape_cost.py [--quick] [--reps 3] [--users 64] [--seconds 8] [--stream]``.
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from generator_ceiling import RAMP_S, SCENARIO, STOP_AFTER_S, _completions, pinned
from harness import REPO, Sampler, command_line, cores, fast_server, median, run_folder, table, tool_env

VLLM_METRICS = REPO / "tests" / "loadgen" / "core" / "wire" / "fixtures" / "vllm-0.26-h200" / "default-metrics-busy.txt"
SERVERS = """
[[endpoint.servers]]
name = "prefill0"
role = "prefill"
base_url = "{url}"
[[endpoint.servers]]
name = "decode0"
role = "decode"
base_url = "{url}"
"""
VARIANTS = ("one endpoint", "two servers")


@dataclass(frozen=True, slots=True)
class Measured:
    requests: int
    window_s: float
    locust_cpu_s: float  # the Locust process's CPU seconds in the window
    owner_cpu_s: float  # the ``loadgen run`` process's own: its scrapers (and its wait for Locust)

    @property
    def rate(self) -> float:
        return self.requests / self.window_s

    @property
    def per_core(self) -> float:
        """Requests per CPU-second of the generator (owner and Locust): its rate on a core of its own."""
        cpu = self.locust_cpu_s + self.owner_cpu_s
        return self.requests / cpu if cpu > 0 else float("nan")


WARM_CANARIES = 300  # the first, uncounted run's canaries: it gives the rate that sizes the quota


def run_once(
    url: str, scenario: Path, users: int, canaries: int, out_dir: Path, gen_cpu: int, seconds: float
) -> Measured:
    """One headless run pinned to ``gen_cpu``: recorded requests completing in the steady window, and the CPU of
    Locust and of the owner over it (``generator_ceiling.py``'s window)."""
    cmd = [sys.executable, "-m", "loadgen", "run", str(scenario), "--host", url, "--levels", str(users)]
    cmd += ["--canaries-per-level", str(canaries), "--out", str(out_dir), "--no-report", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, cwd=REPO, env=tool_env(None), **pinned(gen_cpu))  # type: ignore[call-overload]
    with Sampler(proc.pid, every_s=0.2) as owner, Sampler(proc.pid, child_marker="locust", every_s=0.2) as locust:
        run_dir = run_folder(proc, cmd, STOP_AFTER_S + 3 * (RAMP_S + seconds))
    times, canary_times = _completions(run_dir)
    last_canary = max(canary_times, default=0.0)
    t0 = min(times) + RAMP_S
    n = sum(1 for t in times if t0 <= t <= last_canary)
    return Measured(n, last_canary - t0, locust.cpu_between(t0, last_canary), owner.cpu_between(t0, last_canary))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 repetitions of 4 s")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--users", type=int, default=64, help="background users (plus one canary user)")
    p.add_argument("--seconds", type=float, default=8.0, help="steady window per measurement")
    p.add_argument("--stream", action="store_true", help="background requests streamed (SSE)")
    args = p.parse_args()
    if args.quick:
        args.reps, args.seconds = 2, 4.0
    server_cpu, gen_cpu = cores()
    print(f"command: {command_line()}")
    print(
        f"server on core {server_cpu}, generator (loadgen run, its scrapers and Locust) on core {gen_cpu}; "
        f"{args.users} background users + 1 canary user; background {'streamed' if args.stream else 'whole'}; "
        f"/metrics body {VLLM_METRICS.stat().st_size:,} bytes; {args.reps} reps alternating\n"
    )
    rows: list[tuple[str, int, Measured]] = []
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-scrape-")))
        body = tmp / "metrics.txt"
        running = re.compile(r"^(vllm:num_requests_running\{[^}]*\}) \S+$", re.M)
        body.write_text(running.sub(r"\1 100000.0", VLLM_METRICS.read_text()))
        url, _ = stack.enter_context(fast_server(server_cpu, "--metrics", str(body)))
        base = SCENARIO.format(users=args.users, stream=str(args.stream).lower())
        scenarios = {VARIANTS[0]: tmp / "one.toml", VARIANTS[1]: tmp / "two.toml"}
        scenarios[VARIANTS[0]].write_text(base)
        scenarios[VARIANTS[1]].write_text(base + SERVERS.format(url=url))
        # the quota that fills the window, from a first run's rate (not counted)
        # (enough canaries to run well past the ramp: 20 ended inside it, and the window came out empty)
        warm = run_once(url, scenarios[VARIANTS[0]], args.users, WARM_CANARIES, tmp / "runs", gen_cpu, args.seconds)
        quota = max(20, math.ceil(warm.rate * (args.seconds + RAMP_S) / (args.users + 1)))
        for rep in range(args.reps):
            for which in VARIANTS if rep % 2 == 0 else VARIANTS[::-1]:
                rows.append(
                    (
                        which,
                        rep,
                        run_once(url, scenarios[which], args.users, quota, tmp / "runs", gen_cpu, args.seconds),
                    )
                )
                time.sleep(0.5)
        scraped = [len(list(d.glob("engine_metrics*.jsonl"))) for d in sorted((tmp / "runs").iterdir())]
    fmt = [
        (
            w,
            r,
            m.requests,
            f"{m.window_s:.1f}",
            f"{m.rate:,.0f}",
            f"{m.locust_cpu_s / m.window_s:.0%}",
            f"{m.owner_cpu_s / m.window_s:.1%}",
            f"{m.per_core:,.0f}",
        )
        for w, r, m in rows
    ]
    head = ["variant", "rep", "requests", "window s", "req/s", "Locust CPU", "owner CPU", "req/CPU-s"]
    print(table(head, fmt))
    one, two = VARIANTS
    print(f"\nsample files per run folder (warm-up first): {scraped}")
    print(f"medians over {args.reps} reps, and two / one (of the medians; median of the alternated pairs'):")
    for name, attr in (("req/s", "rate"), ("req per generator CPU-second", "per_core")):
        mid = {v: median([getattr(m, attr) for w, _, m in rows if w == v]) for v in VARIANTS}
        pairs = [getattr(b, attr) / getattr(a, attr) for (_, _, a), (_, _, b) in _pairs(rows)]
        print(
            f"  {name}: {one} {mid[one]:,.0f}, {two} {mid[two]:,.0f}; two / one {mid[two] / mid[one]:.3f}; "
            f"pairs {median(pairs):.3f} ({', '.join(f'{x:.2f}' for x in pairs)})"
        )
    owner = {v: median([m.owner_cpu_s / m.window_s for w, _, m in rows if w == v]) for v in VARIANTS}
    print(
        f"owner CPU (its scrapers): {one} {owner[one]:.1%}, {two} {owner[two]:.1%} of a core; "
        f"the second scraper {owner[two] - owner[one]:+.1%} (target: two / one >= 0.95 per generator CPU-second)"
    )


def _pairs(rows: list[tuple[str, int, Measured]]) -> list[list[tuple[str, int, Measured]]]:
    """Each repetition's (one endpoint, two servers) runs, taken back to back."""
    reps = sorted({r for _, r, _ in rows})
    return [sorted((x for x in rows if x[1] == rep), key=lambda x: VARIANTS.index(x[0])) for rep in reps]


if __name__ == "__main__":
    main()
