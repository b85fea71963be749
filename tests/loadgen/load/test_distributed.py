"""Distributed runs on Locust's own master/worker mode: ``--processes 2``, and a worker killed mid-run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson

from collectors.jsonl import read_jsonl
from loadgen.core.manifest import read_manifest
from scenarios import path_of

LOCUSTFILE = Path(__file__).parents[3] / "loadgen" / "load" / "locustfile.py"  # as docs/running.md runs it
LEVELS = [0, 2, 4]
PER_LEVEL = 6


def loadgen_run(host: str, out: Path, *extra: str, scenario: Path | None = None) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "loadgen",
        "run",
        str(scenario or path_of("quickstart")),
        "--host",
        host,
        "--out",
        str(out),
        "--levels",
        ",".join(map(str, LEVELS)),
        "--canaries-per-level",
        str(PER_LEVEL),
        "--processes",
        "2",
        *extra,
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def quotas() -> Counter[tuple[str, int]]:
    return Counter({("warmup", 0): 1, ("baseline", 0): 4, **{("sweep", lvl): PER_LEVEL for lvl in LEVELS}})


def test_two_processes_merge_into_one_report(fault_server: str, quickstart_short_settle: Path, tmp_path: Path) -> None:
    proc = loadgen_run(fault_server, tmp_path / "runs", scenario=quickstart_short_settle)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err.decode()[-3000:]
    run_dir = Path(out.decode().strip().splitlines()[-1])
    files = sorted(run_dir.glob("background-w*.jsonl"))
    assert len(files) == 2  # each worker writes its own file
    canaries = [r for f in run_dir.glob("canaries-w*.jsonl") for r in read_jsonl(f).rows]
    assert Counter((r["phase"], r["level"]) for r in canaries) == quotas()
    manifest = read_manifest(run_dir)
    assert manifest.status == "finished" and len(manifest.workers) == 2 and manifest.workers_vanished == []
    report = orjson.loads((run_dir / "report.json").read_bytes())
    assert report["input"]["records"] == len(canaries)
    assert [lv["canaries"] for lv in report["canaries"][0]["levels"]] == [PER_LEVEL] * len(LEVELS)


def test_sigkilled_worker_loses_no_completed_canary(engine_url: str, tmp_path: Path) -> None:
    """Kill the worker that holds the canary user mid-sweep: Locust restarts the user on the other worker,
    every record written before the kill survives, every level still gets its quota, the report says so."""
    proc = loadgen_run(engine_url, tmp_path)
    try:
        deadline = time.monotonic() + 120
        victim: Path | None = None
        while victim is None:
            assert time.monotonic() < deadline, "no sweep canaries appeared"
            assert proc.poll() is None, proc.communicate()[1].decode()[-3000:]
            for f in tmp_path.glob("*/canaries-w*.jsonl"):
                if sum(1 for r in read_jsonl(f).rows if r["phase"] == "sweep") >= 3:
                    victim = f
            time.sleep(0.05)
        worker = victim.stem.removeprefix("canaries-")
        pid = orjson.loads((victim.parent / f"process-{worker}.json").read_bytes())["pid"]
        os.kill(pid, signal.SIGKILL)
        before = victim.read_bytes()
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()[-3000:]
    run_dir = victim.parent
    after = victim.read_bytes()
    assert after.startswith(before.rsplit(b"\n", 1)[0])  # nothing written before the kill was lost
    rows = [r for f in run_dir.glob("canaries-w*.jsonl") for r in read_jsonl(f).rows]
    assert len({f for f in run_dir.glob("canaries-w*.jsonl")}) == 2  # the canary user moved to the survivor
    got = Counter((r["phase"], r["level"]) for r in rows)
    for key, quota in quotas().items():
        # the canary in flight at the kill has no record; one written but not yet counted is sent again
        assert quota <= got[key] <= quota + 1, (key, got)
    manifest = read_manifest(run_dir)
    assert manifest.status == "finished"
    assert manifest.workers_vanished == [worker]
    report_md = (run_dir / "report.md").read_text()
    assert f"Worker(s) {worker} vanished" in report_md


def test_plain_locust_master_and_worker_exit_0_on_a_good_run_with_one_stats_table(
    engine_url: str, tmp_path: Path, free_port: int
) -> None:
    """The master/worker commands docs/running.md gives, as a CI job runs them: both exit 0 on a run that finished
    (background cut off at the stop counts as Locust failures, which made the master exit 1), and the master prints
    Locust's stats table once, at the end, not every 2 s."""
    locust = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE)]
    port = ["--master-port", str(free_port)]
    bind = ["--master-bind-host", "127.0.0.1", "--master-bind-port", str(free_port)]
    run = ["--host", engine_url, "--scenario", "quickstart", "--levels", "0,2", "--canaries-per-level", "2"]
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            [*locust, "--worker", "--master-host", "127.0.0.1", *port],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    try:
        master = subprocess.run(
            [*locust, "--master", "--headless", *bind, *run],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=tmp_path,
        )
        worker.wait(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    output = master.stdout + master.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert read_manifest(run_dir).status == "finished", output[-3000:]
    assert master.returncode == 0, output[-3000:]
    assert worker.returncode == 0, (tmp_path / "worker.log").read_text()[-3000:]
    assert output.count("# fails |") == 1, output[-3000:]  # the stats table's header: the summary at the end only
