"""``loadgen.launchers.guard``: a guarded command, and everything it starts, dies with its owner.

Real processes: an owner (a Python process) starts a guarded command that itself starts a worker, as
Locust and vLLM do; the owner is killed with SIGKILL and both must be gone within the guard's grace.
Otherwise the guard must be invisible: exit codes and signal deaths pass through, SIGINT reaches the
command, a missing program is an ``OSError`` at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadgen.launchers.guard import GRACE_S, spawn

# the command: starts a worker, prints both pids, then sleeps (ignoring nothing)
COMMAND = [
    sys.executable,
    "-c",
    "import subprocess, sys, time\n"
    "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
    "import os; print(os.getpid(), w.pid, flush=True)\n"
    "time.sleep(300)\n",
]

OWNER = f"""
import sys
from loadgen.launchers.guard import spawn
proc = spawn({COMMAND!r}, stdout=sys.stdout)
print(proc.pid, flush=True)
proc.wait()
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_sigkill_of_the_owner_ends_the_command_and_its_workers() -> None:
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    guard = int(owner.stdout.readline())
    command, worker = map(int, owner.stdout.readline().split())
    assert all(alive(p) for p in (guard, command, worker))
    assert os.getpgid(command) == os.getpgid(worker) == guard  # one group, led by the guard
    owner.kill()
    owner.wait()
    assert wait_gone([guard, command, worker], GRACE_S + 3) == []


def test_the_guard_exits_as_the_command_did() -> None:
    assert spawn([sys.executable, "-c", "raise SystemExit(3)"]).wait(10) == 3
    killed = spawn([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"])
    assert killed.wait(10) == -signal.SIGTERM


def test_sigint_reaches_the_command_and_a_group_sigterm_stops_it() -> None:
    code = (
        "import time\ntry:\n    print('ready', flush=True)\n    time.sleep(30)\n"
        "except KeyboardInterrupt:\n    raise SystemExit(42)\n"
    )
    proc = spawn([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"  # its SIGINT handler is in place
    proc.send_signal(signal.SIGINT)  # to the guard alone, as loadgen run asks Locust to stop gracefully
    assert proc.wait(10) == 42
    sleeper = spawn([sys.executable, "-c", "import time; time.sleep(30)"])
    time.sleep(0.3)
    os.killpg(sleeper.pid, signal.SIGTERM)  # RunningEngine.stop: the whole group
    assert sleeper.wait(10) == -signal.SIGTERM


def test_a_missing_program_is_an_os_error_at_once(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="no such executable"):
        spawn([str(tmp_path / "no-such-engine")])


def test_a_command_started_where_sigint_is_ignored_still_gets_it() -> None:
    """`nohup loadgen run ... &` starts with SIGINT (and SIGHUP) ignored, and children inherit that: the
    graceful stop the guard forwards must still reach the command."""
    code = (
        "import time\ntry:\n    print('ready', flush=True)\n    time.sleep(30)\n"
        "except KeyboardInterrupt:\n    raise SystemExit(42)\n"
    )
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc = spawn([sys.executable, "-c", code], stdout=subprocess.PIPE)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) == 42
