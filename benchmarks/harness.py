"""Shared plumbing for the benchmark scripts: the fast server process, core pinning, sampling, tables.

Why: every benchmark starts the same near-zero-latency server on one core, runs the generator on
another, samples a process's CPU time and resident memory, and prints a table with the command
that produced it. Not imported by the tool; imports no gevent or Locust (scripts that need gevent
patch it themselves, first).
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]  # no stubs in the venv (types-psutil)

from loadgen.core.record import CanaryRecord
from loadgen.core.wire import Completion

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def cores() -> tuple[int, int]:
    """(server core, generator core): the first and last cores this process may use."""
    allowed = sorted(os.sched_getaffinity(0))
    return allowed[0], allowed[-1]


def command_line() -> str:
    return " ".join([sys.executable, *sys.argv])


@contextmanager
def checkout(rev: str) -> Iterator[Path]:
    """A detached git worktree of ``rev`` in a temporary folder, removed afterwards.

    Put the folder first on ``PYTHONPATH`` and ``python -m loadgen`` runs that revision's tool: the
    editable install's finder comes after the path entries. Lets a benchmark measure an earlier
    version of the tool beside today's in one run (before/after of a fix, same machine, same minute)."""
    folder = Path(tempfile.mkdtemp(prefix="bench-rev-")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(folder), rev], cwd=REPO, check=True)
    try:
        yield folder
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(folder)], cwd=REPO, check=False)
        shutil.rmtree(folder.parent, ignore_errors=True)


def tool_env(tree: Path | None) -> dict[str, str]:
    """The environment for ``python -m loadgen`` from ``tree`` (a ``checkout``), or today's tool for None."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    return env


@contextmanager
def fast_server(cpu: int | None, *args: str) -> Iterator[tuple[str, psutil.Process]]:
    """Start ``benchmarks/fastserver.py`` (pinned to ``cpu``); yield its base URL and process."""
    cmd = [sys.executable, str(HERE / "fastserver.py"), *args]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, cwd=HERE)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode().strip()
        if not line.startswith("READY "):
            raise RuntimeError(f"fastserver did not start: {line!r}")
        yield line.split()[1], psutil.Process(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


def run_folder(proc: subprocess.Popen[bytes], cmd: Sequence[str], deadline_s: float) -> Path:
    """The run folder a headless ``loadgen run`` printed last, once it ends: on its own, or stopped as Ctrl-C would
    at ``deadline_s`` (it keeps its records). A benchmark sizes its canary quota from an earlier run's canary rate,
    and a saturated generator can hold the canary back for seconds each (the canary waits for every slot in flight
    at once, loadgen/load/users.py), so a run may otherwise last far past the window it is measured over."""
    try:
        stdout, _ = proc.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate()
    folder = stdout.decode().strip().splitlines()[-1:] if stdout else []
    if not folder or not Path(folder[0]).is_dir():
        raise SystemExit(f"loadgen run failed ({proc.returncode}): {' '.join(cmd)}")
    return Path(folder[0])


def pct(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1), nearest-rank on the sorted values; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


@dataclass(frozen=True, slots=True)
class Sample:
    t: float  # epoch seconds
    cpu_s: float  # user + system CPU seconds of the process so far
    rss_bytes: int


class Sampler:
    """Samples one process (or the newest descendant matching ``child_marker``) every ``every_s`` in a thread."""

    def __init__(self, pid: int, *, child_marker: str | None = None, every_s: float = 0.25) -> None:
        self.root = psutil.Process(pid)
        self.child_marker = child_marker
        self.every_s = every_s
        self.samples: list[Sample] = []
        self.target_pid: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _target(self) -> psutil.Process | None:
        if self.child_marker is None:
            return self.root
        try:
            for child in self.root.children(recursive=True):
                args = child.cmdline()
                # the guard that watches a child names it in its own arguments: never the guard itself
                if self.child_marker in " ".join(args) and not any(a.endswith("guard.py") for a in args[:3]):
                    return child
        except psutil.Error:
            return None
        return None

    def _run(self) -> None:
        proc: psutil.Process | None = None
        while not self._stop.is_set():
            if proc is None:
                proc = self._target()
            if proc is not None:
                try:
                    with proc.oneshot():
                        times = proc.cpu_times()
                        self.samples.append(Sample(time.time(), times.user + times.system, proc.memory_info().rss))
                    self.target_pid = proc.pid
                except psutil.Error:
                    return
            self._stop.wait(self.every_s)

    def cpu_between(self, t0: float, t1: float) -> float:
        """CPU seconds used in [t0, t1] (``cpu_between``); NaN where the samples do not cover the window.

        A window that ended a moment ago (a run just over) waits for the first sample after it."""
        give_up = time.time() + 4 * self.every_s
        while self._thread.is_alive() and not (self.samples and self.samples[-1].t >= t1) and time.time() < give_up:
            time.sleep(self.every_s / 4)
        return cpu_between(self.samples, t0, t1)


def cpu_at(samples: Sequence[Sample], t: float) -> float | None:
    """The process's CPU seconds so far at ``t``, linear between the two samples around it; None outside them.

    Interpolated, not read from the samples inside a window and scaled: a window a few sampling intervals
    long would otherwise be measured over a shorter span and stretched to fit."""
    for before, after in pairwise(samples):
        if before.t <= t <= after.t:
            if after.t == before.t:
                return before.cpu_s
            return before.cpu_s + (after.cpu_s - before.cpu_s) * (t - before.t) / (after.t - before.t)
    return None


def cpu_between(samples: Sequence[Sample], t0: float, t1: float) -> float:
    """CPU seconds used in [t0, t1]; NaN when the samples do not cover both ends (the process was not
    found, or ended, or the window is empty): a figure never comes from a part of the window."""
    start, end = cpu_at(samples, t0), cpu_at(samples, t1)
    if start is None or end is None or t1 <= t0:
        return float("nan")
    return end - start


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def table(header: Sequence[str], rows: Sequence[Sequence[object]], widths: Sequence[int] | None = None) -> str:
    """A plain fixed-width table; floats are printed as given (format them first)."""
    widths = widths or [max(len(str(h)), *(len(str(r[i])) for r in rows)) + 2 for i, h in enumerate(header)]
    lines = ["".join(str(h).rjust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("-" * len(lines[0]))
    lines.extend("".join(str(c).rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
    return "\n".join(lines)


def canary_record(c: Completion, *, request: dict[str, Any] | None = None) -> CanaryRecord:
    """A record as ``CanaryUser._send`` builds it, for a completion that came back ok."""
    return CanaryRecord(
        run_id="bench",
        canary_id="bench",
        request_id=uuid.uuid4().hex,
        phase="sweep",
        level=256,
        inflight_at_send=255,
        sent_at=time.time(),
        status="ok",
        latency_s=0.001,
        ttft_s=None,
        error_kind=None,
        error_message=None,
        http_status=200,
        endpoint="completions",
        stream=False,
        request=request or {},
        worker="pid1",
        token_ids=c.token_ids,
        tokens=c.tokens,
        logprobs=c.logprobs,
        top_logprobs=c.top_logprobs,
        text=c.text,
        finish_reason=c.finish_reason,
        usage=c.usage,
    )
