"""SIGTERM mid-run: Locust stops gracefully, the manifest says interrupted, the report covers what was collected."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from collectors.jsonl import read_jsonl
from loadgen.core.manifest import read_manifest


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_finishes_manifest_and_reports(engine_url: str, tmp_path: Path, sig: signal.Signals) -> None:
    cmd = [
        sys.executable,
        "-m",
        "loadgen",
        "run",
        "quickstart",
        "--host",
        engine_url,
        "--out",
        str(tmp_path),
        "--levels",
        "0,4,16",
        "--canaries-per-level",
        "40",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not any(r["phase"] == "sweep" for f in tmp_path.glob("*/canaries.jsonl") for r in read_jsonl(f).rows):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()[1].decode()[-2000:]
        time.sleep(0.1)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 1, err.decode()[-2000:]  # ran, but did not finish
    run_dir = Path(out.decode().split()[-1])
    manifest = read_manifest(run_dir)
    assert manifest.status == "interrupted" and manifest.finished
    rows = read_jsonl(run_dir / "canaries.jsonl").rows
    report = orjson.loads((run_dir / "report.json").read_bytes())
    assert report["input"]["records"] == len(rows) > 0
    assert any("did not finish" in n for n in report["run"]["notices"])
    assert sum(lv["canaries"] for lv in report["levels"]) < 3 * 40
    # Locust itself stopped gracefully (its users finished or were recorded as cancelled), not killed
    (process,) = run_dir.glob("process-*.json")
    assert orjson.loads(process.read_bytes())["finished"] is True
