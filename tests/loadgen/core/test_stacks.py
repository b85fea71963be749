"""``kill -USR1`` on a loadgen process prints its stacks to its log and leaves it running (loadgen.core.stacks).

Through the real ``loadgen run --ui``: the CLI process and the Locust process below it both dump, and the web
UI still answers afterwards; then the session stops as usual.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from loadgen.studies.ui_session import LOG_NAME
from tests.loadgen.stop_process import descendants, stop


def _wait_for(path: Path, text: str, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while True:
        body = path.read_text(errors="replace") if path.exists() else ""
        if text in body or time.monotonic() > deadline:
            return body
        time.sleep(0.1)


def test_usr1_dumps_the_stacks_of_the_cli_and_of_locust_and_both_run_on(
    fault_server: str, tmp_path: Path, free_port: int, wait_http: Callable[[str], None]
) -> None:
    log_path, runs = tmp_path / "cli.log", tmp_path / "runs"
    cmd = ["run", "--ui", "--host", fault_server, "--web-port", str(free_port), "--out", str(runs)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "loadgen", *cmd], stdout=log, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{free_port}"
        wait_http(base + "/")
        argv = {p: Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0") for p in descendants(proc.pid)}
        (locust,) = [p for p, args in argv.items() if args[1:4] == [b"-P", b"-m", b"locust"]]
        os.kill(proc.pid, signal.SIGUSR1)
        os.kill(locust, signal.SIGUSR1)
        # the main thread's stack comes last and ends at the module run by ``python -m``
        cli_log = _wait_for(log_path, "_run_module_as_main")
        locust_log = _wait_for(runs / LOG_NAME, "_run_module_as_main")
        assert "most recent call first" in cli_log and "loadgen/studies/run.py" in cli_log, cli_log[-3000:]
        assert "most recent call first" in locust_log and "gevent" in locust_log, locust_log[-3000:]
        with urllib.request.urlopen(base + "/", timeout=10) as resp:  # both still running
            assert resp.status == 200
        assert proc.poll() is None
    finally:
        code = stop(proc, log_path, runs / LOG_NAME)
    assert code == 0, log_path.read_text()[-2000:]
