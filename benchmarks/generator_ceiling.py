"""Generator ceiling: requests/s per core of a real ``loadgen run`` versus a bare gevent loop, side by side.

Why: a determinism verdict is only as good as the load behind it. Against a near-zero-latency
server (``fastserver.py``, pinned to one core) this script alternates, in one run, a real headless
``loadgen run`` (Locust, one canary user and ``--users`` background users, every canary and every
background request recorded to JSONL) with ``bare_loop.py`` (same client library, same bodies,
same number of connections, nothing recorded) and with plain Locust (``plain_locust.py``: as many
``FastHttpUser`` users posting the same bodies). Every generator is pinned to the other core.

The tool's rate counts every recorded request completing inside the steady window (``steady_window``:
``--seconds`` long from one second after the first completion, never past the last canary's, so the
drain is left out), read back from ``canaries.jsonl`` and ``background.jsonl``; its CPU is the Locust
process's, sampled with psutil and interpolated at the window's ends (``harness.cpu_between``). "per
core" divides by the CPU seconds the generator actually used in the window; a window the samples do
not cover prints ``n/a``, never a figure from part of it. The run's canary quota is sized from the
canary rate the same variant showed the time before, so a run lasts about ``--seconds``.
Targets per core: tool / bare >= 0.75, tool / plain Locust >= 1.5. Plain Locust is timed as the tool is.

``--baseline REV[,REV...]`` adds the tool as it was at each git revision (a temporary worktree per
revision), alternated with the others: each fix's before/after measured in the same run.

Run: ``python benchmarks/generator_ceiling.py [--quick] [--reps 3] [--users 64] [--seconds 8] [--stream]
[--baseline REV[,REV...]]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import orjson
from harness import REPO, Sampler, checkout, command_line, cores, fast_server, median, run_folder, table, tool_env

from loadgen.core.scenario import load_scenario
from loadgen.load.background import BackgroundBodies

STOP_AFTER_S = 60.0  # start-up, probe, warm-up and baseline before the sweep's window
RAMP_S = 1.0  # left out at the start of the tool's window: users spawning, first connections
SCENARIO = """\
name = "bench-ceiling"
[endpoint]
kind = "completions"
[[canaries]]
id = "bench"
prompt = "The history of the old harbour town begins with a small group of fishermen who"
max_tokens = 64
seed = 0
logprobs = true
top_logprobs = 2
[background]
seed = 7
prompt_words = [8, 120]
max_tokens = [16, 96]
shared_prefix_share = 0.25
stream = {stream}
[sweep]
levels = [{users}]
canaries_per_level = 10
warmup = 0
baseline = 0
settle_timeout_s = 5
"""


@dataclass(frozen=True, slots=True)
class Measured:
    requests: int
    window_s: float
    cpu_s: float  # generator CPU seconds in the window
    server_cpu_s: float

    @property
    def rate(self) -> float:
        return self.requests / self.window_s if self.window_s > 0 else float("nan")

    @property
    def per_core(self) -> float:
        return self.requests / self.cpu_s if self.cpu_s > 0 else float("nan")


def steady_window(times: list[float], last_canary: float, ramp_s: float, seconds: float) -> tuple[int, float, float]:
    """(requests completed in the window, its start, its end): from ``ramp_s`` after the first completion,
    ``seconds`` long, cut at the last canary's completion (after it the background only drains)."""
    if not times:
        return 0, 0.0, 0.0
    t0 = min(times) + ramp_s
    t1 = max(t0, min(t0 + seconds, last_canary))
    return sum(1 for t in times if t0 <= t <= t1), t0, t1


def share(part: float, whole: float) -> str:
    """``part / whole`` as a percentage; ``n/a`` where either is not a number."""
    return "n/a" if math.isnan(part) or not whole > 0 else f"{part / whole:.0%}"


def count(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.0f}"


def ratio(value: float, reference: float) -> str:
    return "n/a" if math.isnan(value) or not reference > 0 else f"{value / reference:.2f}x"


def measured_median(values: list[float]) -> float:
    """The median of the figures that were measured (NaN: a window the samples did not cover)."""
    return median([v for v in values if not math.isnan(v)])


def pinned(cpu: int) -> dict[str, object]:
    return {"preexec_fn": lambda: os.sched_setaffinity(0, {cpu})}


def write_bodies(scenario_path: Path, users: int, out: Path, per_user: int = 60) -> None:
    """The bare loop's bodies: what the tool's background users send, serialised up front."""
    spec = load_scenario(scenario_path).background
    lines: list[bytes] = []
    for user in range(users):
        gen = BackgroundBodies(spec, user, kind="completions", model="bench/fixed", stream=spec.stream)
        lines.extend(gen.next().payload for _ in range(per_user))
    out.write_bytes(b"\n".join(lines) + b"\n")


def run_bare(url: str, bodies: Path, users: int, seconds: float, gen_cpu: int, server: Sampler) -> Measured:
    cmd = [
        sys.executable,
        str(Path(__file__).with_name("bare_loop.py")),
        "--url",
        url,
        "--bodies",
        str(bodies),
        "--users",
        str(users),
        "--seconds",
        str(seconds),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, **pinned(gen_cpu))  # type: ignore[call-overload]
    res = json.loads(out.stdout.decode().strip().splitlines()[-1])
    e0, e1 = res["epoch"]
    return Measured(res["requests"], res["window_s"], res["cpu_s"], server.cpu_between(e0, e1))


def run_locust(
    url: str, bodies: Path, users: int, seconds: float, gen_cpu: int, server: Sampler, times_out: Path
) -> Measured:
    """Plain Locust (``plain_locust.py``: ``FastHttpUser``, the same bodies), timed as the tool is."""
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(Path(__file__).with_name("plain_locust.py")),
        "--headless",
        "--only-summary",
        "--loglevel",
        "WARNING",
        "--host",
        url,
        "--users",
        str(users),
        "--spawn-rate",
        str(users * 10),
        "--run-time",
        f"{math.ceil(seconds + RAMP_S + 1)}s",
    ]
    env = {**os.environ, "BENCH_BODIES": str(bodies), "BENCH_TIMES_OUT": str(times_out)}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, **pinned(gen_cpu))  # type: ignore[call-overload]
    with Sampler(proc.pid, every_s=0.2) as gen:
        proc.wait()
        times: list[float] = json.loads(times_out.read_text())
        n, t0, t1 = steady_window(times, max(times, default=0.0), RAMP_S, seconds)
        cpu = gen.cpu_between(t0, t1)
    return Measured(n, t1 - t0, cpu, server.cpu_between(t0, t1))


def _completions(run_dir: Path) -> tuple[list[float], list[float]]:
    """Completion times (epoch) of every recorded request, and of the canaries among them."""
    times: list[float] = []
    canaries: list[float] = []
    for name in ("canaries.jsonl", "background.jsonl"):
        for line in (run_dir / name).read_bytes().splitlines():
            row = orjson.loads(line)
            if row.get("latency_s") is None:
                continue
            t = float(row["sent_at"]) + float(row["latency_s"])
            times.append(t)
            if name == "canaries.jsonl":
                canaries.append(t)
    return times, canaries


def run_tool(
    url: str,
    scenario: Path,
    users: int,
    canaries: int,
    out_dir: Path,
    gen_cpu: int,
    server: Sampler,
    tree: Path | None,
    seconds: float,
) -> tuple[Measured, float]:
    """One headless run of today's tool, or of the revision checked out at ``tree``; and its canaries per second."""
    cmd = [
        sys.executable,
        "-m",
        "loadgen",
        "run",
        str(scenario),
        "--host",
        url,
        "--levels",
        str(users),
        "--canaries-per-level",
        str(canaries),
        "--out",
        str(out_dir),
        "--no-report",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, cwd=tree or REPO, env=tool_env(tree), **pinned(gen_cpu))  # type: ignore[call-overload]
    with Sampler(proc.pid, child_marker="locust", every_s=0.2) as gen:
        run_dir = run_folder(proc, cmd, STOP_AFTER_S + 3 * (RAMP_S + seconds))
    times, canary_times = _completions(run_dir)
    n, t0, t1 = steady_window(times, max(canary_times, default=0.0), RAMP_S, seconds)
    span = max(canary_times, default=0.0) - min(canary_times, default=0.0)
    canary_rate = (len(canary_times) - 1) / span if span > 0 else 0.0
    return Measured(n, t1 - t0, gen.cpu_between(t0, t1), server.cpu_between(t0, t1)), canary_rate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 repetitions of 4 s")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--users", type=int, default=64, help="background users (plus one canary user)")
    p.add_argument("--seconds", type=float, default=8.0, help="steady window per measurement")
    p.add_argument("--stream", action="store_true", help="background requests streamed (SSE)")
    p.add_argument(
        "--baseline",
        metavar="REV[,REV...]",
        default="",
        help="also run the tool as of these git revisions (before/after)",
    )
    args = p.parse_args()
    if args.quick:
        args.reps, args.seconds = 2, 4.0
    server_cpu, gen_cpu = cores()
    print(f"command: {command_line()}")
    print(
        f"server on core {server_cpu}, generators on core {gen_cpu}; {args.users} background users + 1 canary user; "
        f"background {'streamed' if args.stream else 'whole'}; {args.reps} reps alternating\n"
    )
    rows: list[tuple[str, int, Measured]] = []
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-ceiling-")))
        url, server_proc = stack.enter_context(fast_server(server_cpu))
        trees: dict[str, Path | None] = {"tool": None}
        for rev in filter(None, args.baseline.split(",")):
            trees[f"tool@{rev}"] = stack.enter_context(checkout(rev))
        variants = ["bare", "locust", *reversed(trees)]
        scenario = tmp / "ceiling.toml"
        scenario.write_text(SCENARIO.format(users=args.users, stream=str(args.stream).lower()))
        bodies = tmp / "bodies.jsonl"
        write_bodies(scenario, args.users, bodies)
        with Sampler(server_proc.pid, every_s=0.2) as server:
            rate_guess = 1500.0
            canary_rate: dict[str, float] = {}  # per variant, from its last run: sizes its next quota
            for rep in range(args.reps):
                for which in variants if rep % 2 == 0 else variants[::-1]:
                    if which == "bare":
                        m = run_bare(url, bodies, args.users + 1, args.seconds, gen_cpu, server)
                        rate_guess = m.rate
                    elif which == "locust":
                        m = run_locust(url, bodies, args.users + 1, args.seconds, gen_cpu, server, tmp / "times.json")
                    else:
                        per_s = canary_rate.get(which) or rate_guess / (args.users + 1)
                        quota = max(20, math.ceil(1.2 * per_s * (args.seconds + RAMP_S)))
                        m, canary_rate[which] = run_tool(
                            url, scenario, args.users, quota, tmp / "runs", gen_cpu, server, trees[which], args.seconds
                        )
                    rows.append((which, rep, m))
                    time.sleep(0.5)
    fmt = [
        (
            w,
            r,
            m.requests,
            f"{m.window_s:.1f}",
            count(m.rate),
            share(m.cpu_s, m.window_s),
            count(m.per_core),
            share(m.server_cpu_s, m.window_s),
        )
        for w, r, m in rows
    ]
    header = ["generator", "rep", "requests", "window s", "req/s", "gen CPU", "req/s/core", "server CPU"]
    print(table(header, fmt))
    bare = [m for w, _, m in rows if w == "bare"]
    b_rate, b_core = measured_median([m.rate for m in bare]), measured_median([m.per_core for m in bare])
    l_core = measured_median([m.per_core for w, _, m in rows if w == "locust"])
    print(
        f"\nmedians over {args.reps} reps; ratio = variant / bare (target >= 0.75x per core), "
        "vs locust = variant / plain Locust per core (target >= 1.5x)"
    )
    summary = []
    for name in dict.fromkeys(w for w, _, _ in rows):
        mine = [m for w, _, m in rows if w == name]
        rate, core = measured_median([m.rate for m in mine]), measured_median([m.per_core for m in mine])
        summary.append((name, count(rate), ratio(rate, b_rate), count(core), ratio(core, b_core), ratio(core, l_core)))
    header = ["generator", "req/s", "ratio", "req/s/core", "ratio/core", "vs locust"]
    print(table(header, summary, [16, 10, 8, 12, 12, 11]))


if __name__ == "__main__":
    main()
