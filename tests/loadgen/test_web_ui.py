"""``loadgen run --ui``: Locust's web UI on the scenario; a start from its form, with values typed as text."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

from collectors.jsonl import read_jsonl
from collectors.manifest import read_manifest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_form_start_uses_typed_options_and_reports(fault_server: str, tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen", "run", "--ui", "--host", fault_server, "--web-port", str(port),
         "--out", str(tmp_path), "--levels", "0,1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/")
        form = {"levels": " 0, 2", "canaries_per_level": "2", "labels": "from=ui", "scenario": "quickstart"}
        req = urllib.request.Request(base + "/swarm", data=urllib.parse.urlencode(form).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.loads(resp.read())["success"] is True
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("*/report.json")):
            assert time.monotonic() < deadline, "no report from the UI-started run"
            assert proc.poll() is None
            time.sleep(0.2)
        (run_dir,) = [p.parent for p in tmp_path.glob("*/report.json")]
        manifest = read_manifest(run_dir)
        assert manifest["levels"] == [0, 2] and manifest["canaries_per_level"] == 2
        assert manifest["labels"] == {"from": "ui"} and manifest["status"] == "finished"
        rows = read_jsonl(run_dir / "canaries.jsonl").rows
        assert len(rows) == 1 + 4 + 2 * 2
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()[-2000:]
