"""Start and stop an engine process and wait until it serves: the embedded engine for now.

Why: ``loadgen run`` with no endpoint, and tests, need a real server on a free port, started as a
subprocess and stopped for sure. The engine prints ``READY <url>`` once it accepts connections;
its output goes to a log file in the run's folder or a temporary one. An engine that never gets
ready is an ``EngineError`` carrying the command and the log tail. No Locust imports.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from loadgen.errors import EngineError

_TAIL_LINES = 30


@dataclass
class RunningEngine:
    url: str
    process: subprocess.Popen[bytes]
    command: list[str]
    log_path: Path

    def stop(self, timeout_s: float = 10.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)

    def __enter__(self) -> RunningEngine:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def log_tail(path: Path, lines: int = _TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_embedded(args: list[str], *, log_path: Path, ready_timeout_s: float = 60.0) -> RunningEngine:
    """Start ``python -m loadgen.engine --port 0 ARGS`` and return once it prints ``READY <url>``."""
    command = [sys.executable, "-m", "loadgen.engine", "--host", "127.0.0.1", "--port", "0", *args]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_fh = open(log_path, "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log_fh, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    log_fh.close()
    assert proc.stdout is not None
    deadline = time.monotonic() + ready_timeout_s
    os.set_blocking(proc.stdout.fileno(), False)
    buf = b""
    while time.monotonic() < deadline:
        chunk = proc.stdout.read()
        if chunk:
            buf += chunk
            for line in buf.splitlines():
                if line.startswith(b"READY "):
                    _drain_to(proc, log_path, buf)
                    return RunningEngine(line.split()[1].decode(), proc, command, log_path)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    with open(log_path, "ab") as fh:
        fh.write(buf)
    raise EngineError(
        f"engine did not become ready within {ready_timeout_s:g} s (exit code {proc.returncode})\n"
        f"command: {' '.join(command)}\nlog tail ({log_path}):\n{log_tail(log_path)}"
    )


def _drain_to(proc: subprocess.Popen[bytes], log_path: Path, already: bytes) -> None:
    """Keep the child's stdout from filling its pipe: copy it into the log in a daemon thread."""
    import threading

    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), True)

    def pump() -> None:
        assert proc.stdout is not None
        with open(log_path, "ab") as fh:
            fh.write(already)
            for line in proc.stdout:
                fh.write(line)
                fh.flush()

    threading.Thread(target=pump, daemon=True).start()
