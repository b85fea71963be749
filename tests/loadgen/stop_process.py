"""Stop a ``loadgen`` process the way a person would, and say where it hung if it does not stop.

Tests that start ``loadgen run --ui`` (or another long-lived command) end it with a signal in a ``finally``.
A process that does not exit in time is asked for its stacks (``kill -USR1``, ``loadgen.core.stacks``), it
and every loadgen or Locust process below it, then killed; the test fails with the logs' tails, where the
dumps land. Without this a rare hang leaves only "timed out" and an orphaned process behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux ``/proc``), parents before children."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _dumps_stacks(pid: int) -> bool:
    """A loadgen or Locust process (they register the dump), not the guard nor an engine of another kind."""
    try:
        argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    text = b" ".join(argv)
    return b"guard.py" not in text and (b"loadgen" in text or b"locust" in text)


def stop(proc: subprocess.Popen[bytes], *logs: Path, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
    """Send ``sig`` and wait up to ``timeout`` s; the exit code. On a hang: stacks, kill, and a failed test."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    tree = [proc.pid, *descendants(proc.pid)]
    for pid in tree:
        if _dumps_stacks(pid):
            os.kill(pid, signal.SIGUSR1)
    time.sleep(2)  # the dumps are written by the signal handlers, in C; give them the time to land
    for pid in reversed(tree):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()
    tails = "\n".join(f"--- {log} ---\n{log.read_text(errors='replace')[-6000:]}" for log in logs if log.exists())
    pytest.fail(f"{proc.args!r} did not exit {timeout:.0f} s after signal {sig}; stacks in the logs:\n{tails}")
