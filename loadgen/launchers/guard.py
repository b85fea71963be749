"""Start a command so that it, and every process it starts, dies with the process that started it.

Why: a ``loadgen run`` killed with SIGKILL runs no cleanup, and the engine and Locust (with its worker
processes) it started would run on: holding the port and the GPU, sending load into a run nobody
records. Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)``) reaches one process only, when its
own parent dies; the command's children (Locust's workers, vLLM's, a shell's) are not covered. So the
owner starts this small guard as the leader of a new process group (``spawn``); the guard asks for
SIGHUP on its owner's death and runs the command in its group; on that signal it ends the whole group:
SIGTERM, up to ``GRACE_S`` for the command to exit, then SIGKILL.

Otherwise the guard is transparent: its exit status is the command's (a signal death included), SIGINT
sent to it is passed on to the command (Locust's graceful stop), and SIGTERM is left to the group-wide
signal the owner sends (``os.killpg``), which reaches the command directly. The parent-death signal
fires when the *thread* that started the guard ends: start it from the owner's main thread.

Run as a script (``python -P guard.py OWNER_PID COMMAND [ARG...]``): standard library only, so it starts
in milliseconds and imports nothing from loadgen. Linux only for the parent-death part (elsewhere a
guard whose owner dies is not told, and its group lives until stopped).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

GUARD = Path(__file__).resolve()
GRACE_S = 5.0
_PR_SET_PDEATHSIG = 1


def spawn(command: list[str], *, env: dict[str, str] | None = None, **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``command`` under a guard, in a new session and process group led by the guard.

    The returned process is the guard: signal its group (``os.killpg(proc.pid, ...)``) to stop it all.
    A program that cannot be found is an ``OSError`` here, as ``subprocess.Popen`` would raise."""
    path = (env or os.environ).get("PATH")
    if shutil.which(command[0], path=path) is None:
        raise OSError(errno.ENOENT, "no such executable", command[0])
    argv = [sys.executable, "-P", str(GUARD), str(os.getpid()), *command]
    return subprocess.Popen(argv, env=env, start_new_session=True, **popen)


_WATCHED = {signal.SIGHUP, signal.SIGCHLD, signal.SIGINT, signal.SIGTERM}


def _unblock() -> None:
    """In the command, before it runs: the guard's blocked signals are the command's own business."""
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def _end_group(pid: int) -> None:
    """The owner is gone: ask the group to stop, wait a little for the command, then kill it all."""
    try:
        os.killpg(0, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
            time.sleep(0.05)
    finally:
        os.killpg(0, signal.SIGKILL)  # the guard too: nothing of the group outlives this line


def _exit_as(status: int) -> None:
    """Exit as the command did; a command killed by a signal is mirrored by dying of the same one."""
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        sys.exit(code)
    for signum in _WATCHED - {signal.SIGCHLD}:
        signal.signal(signum, signal.SIG_IGN)  # pending ones must not fire on the way out
    if -code != signal.SIGKILL:
        signal.signal(-code, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    os.kill(os.getpid(), -code)
    sys.exit(128 - code)  # not reached but for a signal whose default is to carry on


def main(argv: list[str]) -> None:
    owner, command = int(argv[0]), argv[1:]
    # every signal the guard acts on is taken with sigwait: none can interrupt it between two steps
    signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)
    # started from `nohup` or a shell's `&`, these may come in ignored, and an ignored signal is dropped, never
    # waited for; the command would inherit the ignoring too (Locust would never see the graceful SIGINT)
    for watched in _WATCHED - {signal.SIGCHLD}:
        signal.signal(watched, signal.SIG_DFL)  # blocked: a default action cannot fire before sigwait takes it
    with contextlib.suppress(AttributeError, OSError):  # not Linux: no parent-death signal
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGHUP, 0, 0, 0)
    if os.getppid() != owner:  # the owner died before the signal was asked for: start nothing
        sys.exit(1)
    try:
        child = subprocess.Popen(command, preexec_fn=_unblock)  # the guard has one thread: preexec_fn is safe
    except OSError as exc:
        print(f"loadgen guard: cannot start {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        sys.exit(127)
    while True:
        pid, status = os.waitpid(child.pid, os.WNOHANG)
        if pid:
            _exit_as(status)
        signum = signal.sigwait(_WATCHED)
        if signum == signal.SIGHUP:
            _end_group(child.pid)
        elif signum == signal.SIGINT:
            os.kill(child.pid, signal.SIGINT)  # the owner's graceful stop, for the command alone
        # SIGTERM: sent to the whole group, so the command has it already; SIGCHLD: look again


if __name__ == "__main__":
    main(sys.argv[1:])
