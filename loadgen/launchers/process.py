"""Start and stop an engine process and wait until it prints ``READY <url>``: the embedded engine.

Why: ``loadgen run`` with no endpoint, and tests, need a real server on a free port, started as a
subprocess and stopped for sure. The engine prints ``READY <url>`` once it accepts connections;
its output goes to a log file in the run's folder or a temporary one. An engine that never gets
ready is an ``EngineError`` carrying the command and the log tail. Engines that announce nothing
and are polled on a health URL instead (vLLM, SGLang, llama.cpp) are started by
``loadgen.launchers``, which returns the same ``RunningEngine``. Every engine runs under
``loadgen.launchers.guard``, leading a process group of its own: it dies with the process that
started it, even one killed with SIGKILL. An engine told to write its step trace
(``loadgen.launchers.step_trace``) has its trace files moved with its log. No Locust imports.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from loadgen.core.errors import EngineArgsError, EngineError
from loadgen.core.runfiles import copy_file, open_append, write_file
from loadgen.launchers.guard import spawn
from loadgen.launchers.step_trace import move_traces, trace_folder

_TAIL_LINES = 30


@dataclass
class RunningEngine:
    url: str
    process: subprocess.Popen[bytes]  # the guard (``loadgen.launchers.guard``) the command runs under
    command: list[str]  # the engine's own command line
    log_path: Path
    group: bool = True  # the process leads its own process group (the guard, a shell, workers): signal it all
    trace_dir: Path | None = None  # where it was told to write its step trace (``LOADGEN_STEP_TRACE``)
    trace_to: Path | None = None  # where its trace files go: the log's folder, once the log has moved

    def move_log(self, path: Path) -> None:
        """Rename the log to ``path`` (on the same file system), where the engine goes on writing: open files
        follow a rename. A run keeps its engine log in its folder from the start, so a killed run keeps it.
        The step trace's files follow into the same folder, now and when the engine stops."""
        os.replace(self.log_path, path)
        self.log_path = path
        self.trace_to = path.parent
        self.collect_trace()

    def collect_trace(self) -> None:
        """Move the trace files written so far to ``trace_to``; a file that cannot move stays (the run goes on)."""
        if self.trace_dir is not None and self.trace_to is not None:
            with contextlib.suppress(OSError):
                move_traces(self.trace_dir, self.trace_to)

    def stop(self, timeout_s: float = 10.0) -> int:
        if self.process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait()
        if self.group:
            self._signal(signal.SIGKILL)  # workers that outlived their parent would hold the GPU and the port
        self.collect_trace()  # a file opened after the log moved (a later process of the engine)
        return int(self.process.returncode)

    def _signal(self, signum: int) -> None:
        try:
            if self.group:
                os.killpg(self.process.pid, signum)
            else:
                self.process.send_signal(signum)
        except ProcessLookupError:  # already gone (the group is empty)
            pass

    def __enter__(self) -> RunningEngine:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def log_tail(path: Path, lines: int = _TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


_USAGE_EXIT = 2  # argparse's exit code for arguments it refuses (the embedded engine, vLLM, SGLang)
_REFUSED = re.compile(r"^\S[^\n]*: error: .+$", re.M)  # argparse's last line: "PROG: error: MESSAGE"


def refused_args(
    returncode: int | None, log_path: Path, command: str, said: str = "the engine refused its arguments"
) -> EngineArgsError | None:
    """A program that exited as a parser does on arguments it refuses: ``said``, its parser's one line, and the
    command; None for any other exit (its log tail then says why)."""
    if returncode != _USAGE_EXIT:
        return None
    found = _REFUSED.findall(log_tail(log_path))
    if not found:
        return None
    return EngineArgsError(f"{said}: {found[-1].strip()} (command: {command})")


def start_embedded(
    args: list[str], *, log_path: Path, ready_timeout_s: float = 60.0, env: dict[str, str] | None = None
) -> RunningEngine:
    """Start ``python -m loadgen.engine --port 0 ARGS`` and return once it prints ``READY <url>``."""
    # -P: the caller's working directory is not put on sys.path (a stray local module cannot shadow a dependency)
    command = [sys.executable, "-P", "-m", "loadgen.engine", "--host", "127.0.0.1", "--port", "0", *args]
    return start_process(command, log_path=log_path, ready_timeout_s=ready_timeout_s, env=env)


def start_process(
    command: list[str], *, log_path: Path, ready_timeout_s: float, env: dict[str, str] | None = None
) -> RunningEngine:
    """Start ``command`` (``env`` added to this process's environment), log its output to ``log_path``,
    and return once it prints ``READY <url>``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open_append(log_path) as log_fh:
        try:
            proc = spawn(
                command,
                stdout=subprocess.PIPE,
                stderr=log_fh,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            )
        except OSError as exc:  # the program is not installed, or not executable
            raise EngineError(
                f"cannot start the engine ({exc.strerror or exc})\ncommand: {' '.join(command)}"
            ) from None
    ready: queue.Queue[bytes | None] = queue.Queue()
    # A thread (a greenlet where gevent has patched the process) copies stdout into the log for the engine's
    # whole life and hands each line over until READY: works patched or not, and the pipe never fills up.
    threading.Thread(target=_pump, args=(proc, log_path, ready), daemon=True).start()
    deadline = time.monotonic() + ready_timeout_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = ready.get(timeout=left)
        except queue.Empty:
            break
        if line is None:  # stdout closed: the engine exited
            proc.wait()
            break
        if line.startswith(b"READY "):
            return RunningEngine(line.split()[1].decode(), proc, command, log_path, trace_dir=trace_folder(env))
    exited = proc.poll() is not None
    RunningEngine("", proc, command, log_path).stop(timeout_s=0)
    if exited and (refused := refused_args(proc.returncode, log_path, " ".join(command))) is not None:
        raise refused
    why = (
        f"exited before it was ready (exit code {proc.returncode})"
        if exited
        else f"did not become ready within {ready_timeout_s:g} s (stopped; exit code {proc.returncode})"
    )
    raise EngineError(f"engine {why}\ncommand: {' '.join(command)}\nlog tail ({log_path}):\n{log_tail(log_path)}")


def _pump(proc: subprocess.Popen[bytes], log_path: Path, ready: queue.Queue[bytes | None]) -> None:
    assert proc.stdout is not None
    handed_over = False
    with open_append(log_path) as fh:
        for line in proc.stdout:
            fh.write(line)
            fh.flush()
            if not handed_over:
                ready.put(line)
                handed_over = line.startswith(b"READY ")
    ready.put(None)


def keep_failed_log(exc: EngineError, log_path: Path, folder: Path) -> EngineError:
    """An engine that failed to start leaves its log and the error (its command included) in ``folder`` as
    ``engine.log`` and ``engine-failed.txt``; the returned error names the kept log, not a temporary file
    that is about to be removed. The original error where nothing can be written."""
    if isinstance(exc, EngineArgsError):  # bad input, said in one line: its log holds only the parser's usage
        return exc
    kept = folder / "engine.log"
    message = str(exc).replace(str(log_path), str(kept))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if log_path.exists() and log_path.resolve() != kept.resolve():
            copy_file(log_path, kept)
        write_file(folder / "engine-failed.txt", message + "\n")
    except OSError:
        return exc
    return EngineError(message)
