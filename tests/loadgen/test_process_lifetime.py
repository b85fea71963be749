"""A ``loadgen run`` killed with SIGKILL takes its engine and Locust (and Locust's workers) with it.

The real CLI runs a long sweep on the embedded engine (or on a prefill/decode topology: two embedded
engines and the real vllm-router); once background load flows it is killed with SIGKILL, which runs no
cleanup of its own. Every process it had started must be gone within seconds (nothing listening on the
engine's, the router's or a server's port), every process's log must be in the run folder, the manifest
must still say ``running`` (the run was cut short), and ``loadgen report`` must still read the folder.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from loadgen.core.manifest import read_manifest

SCENARIO = """
name = "killed"
[[canaries]]
id = "c"
prompt = "The old harbour town begins with"
max_tokens = 8
[background]
prompt_words = [4, 12]
max_tokens = [4, 8]
[sweep]
levels = [3]
canaries_per_level = 100000
warmup = 0
baseline = 1
"""
TOPOLOGY = """
[topology]
mode = "pd"
"""


def children_of(pid: int) -> set[int]:
    """Every living descendant of ``pid``, from /proc."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        kids = {p for p, pp in parent.items() if pp == current}
        found |= kids
        todo.extend(kids)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie nobody reaped has stopped running


def listening(url: str) -> bool:
    host, port = url.removeprefix("http://").split(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def wait_for_background(run_dir: Path, timeout_s: float = 90.0) -> None:
    """Until a sweep canary went out at level 3: the engine, Locust and its background users are all up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for path in run_dir.glob("canaries*.jsonl"):
            for line in path.read_bytes().splitlines():
                if line.strip() and orjson.loads(line).get("level") == 3:
                    return
        time.sleep(0.2)
    raise AssertionError(f"no canary at level 3 within {timeout_s:g} s: {sorted(p.name for p in run_dir.iterdir())}")


@pytest.mark.parametrize(("processes", "topology"), [(0, False), (2, False), (0, True)], ids=["one", "workers", "pd"])
def test_sigkill_of_loadgen_run_leaves_no_engine_and_no_locust(tmp_path: Path, processes: int, topology: bool) -> None:
    scenario = tmp_path / "killed.toml"
    scenario.write_text(SCENARIO + (TOPOLOGY if topology else ""))
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "loadgen", "run", str(scenario), "--out", str(out), "--processes", str(processes)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (runs := [p for p in out.glob("*-killed") if (p / "manifest.json").exists()]):
            assert proc.poll() is None and time.monotonic() < deadline, "loadgen run never made its run folder"
            time.sleep(0.1)
        (run_dir,) = runs
        wait_for_background(run_dir)
        manifest = read_manifest(run_dir)
        urls = [str(manifest.endpoint.base_url), *(s["base_url"] for s in manifest.scenario["endpoint"]["servers"])]
        started = children_of(proc.pid)
        # a guard and its command per process: the engine (a topology: two and the router), Locust (+ workers)
        assert all(map(listening, urls)) and len(started) >= (6 if topology else 2) + 2 + processes
        assert len(urls) == (3 if topology else 1)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    deadline = time.monotonic() + 10
    while (left := {p for p in started if alive(p)}) or any(map(listening, urls)):
        up = [u for u in urls if listening(u)]
        assert time.monotonic() < deadline, f"10 s after the kill: alive {left}, listening {up}"
        time.sleep(0.1)

    manifest = read_manifest(run_dir)
    assert manifest.status == "running" and manifest.finished is None  # cut short: nobody ended it
    engine_logs = ["engine-prefill.log", "engine-decode.log"] if topology else ["engine.log"]
    for name in engine_logs:
        assert "READY http://" in (run_dir / name).read_text()  # the engine's own output, from its start on
    if topology:
        assert "Router ready" in (run_dir / "router.log").read_text()
    assert not list(out.glob(".loadgen-engine-*/*.log"))  # moved into the run folder, not left behind

    report = subprocess.run(
        [sys.executable, "-m", "loadgen", "report", str(run_dir)], capture_output=True, text=True, timeout=120
    )
    assert report.returncode == 0, report.stderr
    run = orjson.loads((run_dir / "report.json").read_bytes())["run"]
    assert run["status"] == "running"
    assert any("was cut short" in n for n in run["notices"])
