"""The real vllm-router in PD mode, started as a process on free ports, for the capture tool and the PD tests.

``start_router`` runs ``python -m vllm_router.launch_router --vllm-pd-disaggregation`` in a session of its own
(stopped with its whole group), logs to a file, and yields its base URL once ``GET /health`` answers 200: the
router binds its port only after every worker's ``/health`` answered, so that is the moment it routes.
``router_available`` says whether the package is installed (the PD tests skip without it).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROUTER_VERSION = "0.1.17"


def router_available() -> bool:
    return importlib.util.find_spec("vllm_router") is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def router_command(prefill: list[str], decode: list[str], port: int, *flags: str) -> list[str]:
    cmd = [sys.executable, "-m", "vllm_router.launch_router", "--vllm-pd-disaggregation"]
    for url in prefill:
        cmd += ["--prefill", url]
    for url in decode:
        cmd += ["--decode", url]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(free_port())]
    return [*cmd, "--worker-startup-check-interval", "1", *flags]


@contextmanager
def start_router(
    prefill: list[str], decode: list[str], log: Path, *flags: str, timeout_s: float = 60.0
) -> Iterator[str]:
    """The router in front of ``prefill`` and ``decode`` base URLs; yields ``http://127.0.0.1:PORT``."""
    port = free_port()
    cmd = router_command(prefill, decode, port, *flags)
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vllm-router exited {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vllm-router not ready in {timeout_s} s: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
