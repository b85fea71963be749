"""Where the generator's CPU goes: a real ``loadgen run`` against the fast server, sampled with py-spy.

Why: "make it fast" starts with knowing what dominates. This script runs the same headless run
as ``generator_ceiling.py`` (fast server on one core, generator on the other) under
``py-spy record --subprocesses``, keeps only the Locust process's samples taken inside a user's
task loop (start-up imports and the parent process left out), and prints the inclusive share of
the tool's own functions (``loadgen/``, ``collectors/``) and of the libraries below them, plus the
top self-time frames. Needs ``py-spy`` (``pip install py-spy``) and ptrace rights.

Run: ``python benchmarks/profile_tool.py [--quick] [--users 64] [--canaries 600] [--stream]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from generator_ceiling import SCENARIO
from harness import REPO, command_line, cores, fast_server, table

LOOP_MARKER = "User.run ("  # a sample below this frame was taken inside a user's task loop
OWN = ("loadgen/", "collectors/")
WATCH = ("geventhttpclient/", "locust/", "orjson", "random.py", "uuid.py", "dataclasses.py")


def frame_key(frame: str) -> str:
    """``func (path/to/file.py:12)`` -> ``func (file.py)``: one entry per function, lines merged."""
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    return f"{name} ({'/'.join(path.split('/')[-2:])})"


def summarise(raw: Path, top: int) -> tuple[int, list[tuple[str, int]], list[tuple[str, int]]]:
    """(samples in task loops, inclusive counts of own functions, self counts of leaf frames)."""
    inclusive: Counter[str] = Counter()
    self_time: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_ = line.rpartition(" ")
        frames = stack.split(";")
        if not any(f.startswith("process ") and "-m locust" in f for f in frames[:3]):
            continue
        if not any(LOOP_MARKER in f for f in frames):
            continue
        n = int(count_)
        total += n
        self_time[frame_key(frames[-1])] += n
        seen: set[str] = set()
        for f in frames:
            if not f.startswith("process ") and any(o in f for o in OWN + WATCH):
                key = frame_key(f)
                if key not in seen:
                    seen.add(key)
                    inclusive[key] += n
    return total, inclusive.most_common(top), self_time.most_common(top)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a shorter run (200 canaries)")
    p.add_argument("--users", type=int, default=64)
    p.add_argument("--canaries", type=int, default=600, help="canaries at the one level (sets the run's length)")
    p.add_argument("--stream", action="store_true", help="background requests streamed (SSE)")
    p.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args()
    if args.quick:
        args.canaries = 200
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        raise SystemExit("py-spy is not installed: pip install py-spy")
    server_cpu, gen_cpu = cores()
    print(f"command: {command_line()}\n")
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp_, fast_server(server_cpu) as (url, _):
        tmp = Path(tmp_)
        scenario = tmp / "profile.toml"
        scenario.write_text(SCENARIO.format(users=args.users, stream=str(args.stream).lower()))
        raw = tmp / "raw.txt"
        cmd = [
            spy,
            "record",
            "--format",
            "raw",
            "--rate",
            str(args.rate),
            "--subprocesses",
            "--nonblocking",
            "-o",
            str(raw),
            "--",
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
            str(args.canaries),
            "--out",
            str(tmp / "runs"),
            "--no-report",
        ]
        pin = lambda: os.sched_setaffinity(0, {gen_cpu})  # noqa: E731
        subprocess.run(cmd, check=True, cwd=REPO, capture_output=True, preexec_fn=pin)
        total, inclusive, self_time = summarise(raw, args.top)
    print(
        f"{total} samples inside Locust task loops ({args.users} background users, "
        f"background {'streamed' if args.stream else 'whole'})\n"
    )
    print("inclusive share of the task loops: the tool's functions and the libraries they call")
    print(table(["share", "function"], [(f"{n / total:.1%}", k) for k, n in inclusive], [8, 70]))
    print("\nself time (leaf frames)")
    print(table(["share", "frame"], [(f"{n / total:.1%}", k) for k, n in self_time], [8, 70]))


if __name__ == "__main__":
    main()
