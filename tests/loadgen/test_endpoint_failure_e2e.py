"""End to end through the real CLI: a run whose endpoint dies, and a run whose records cannot all be
written, must not end "finished" with exit 0, and ``loadgen check`` must not pass them (``report`` and ``check``
on the run folder in this process).

``fault_server.py`` under ``/dying/<key>/<n>`` answers ``n`` completion requests, then cuts every later
one before any byte: here the probe, the baseline and level 0 are answered, and the endpoint is dead
before levels 2 and 4. The losses run sets a 64 KiB file-size limit (``RLIMIT_FSIZE``, SIGXFSZ ignored)
on ``loadgen run`` and its children, with canary records of about 7 KiB each: appends fail, one is
cut mid-line.
"""

from __future__ import annotations

import re
import resource
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from loadgen.core.manifest import read_manifest
from tests.loadgen.cli import clikit

DYING = """
name = "dying"
[endpoint]
base_url = "{url}/dying/{key}/7"
read_timeout_s = 2
[[canaries]]
id = "plain"
prompt = "ok"
[sweep]
levels = [0, 2, 4]
canaries_per_level = 4
warmup = 0
baseline = 2
settle_timeout_s = 0.5
"""

BIG = """
name = "big-records"
[endpoint]
base_url = "{url}"
[[canaries]]
id = "big"
prompt = "{prompt}"
[sweep]
levels = [0]
canaries_per_level = 20
warmup = 0
baseline = 2
"""
LIMIT = 64 * 1024


def loadgen(*argv: str, preexec_fn: Callable[[], None] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *argv], capture_output=True, text=True, timeout=180, preexec_fn=preexec_fn
    )


def _file_size_limit() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, resource.RLIM_INFINITY))


def test_an_endpoint_that_dies_mid_run_is_said_first_and_fails_the_gate(fault_server: str, tmp_path: Path) -> None:
    scenario = tmp_path / "dying.toml"
    scenario.write_text(DYING.format(url=fault_server, key=uuid.uuid4().hex))
    out = loadgen("run", str(scenario), "--out", str(tmp_path / "runs"))
    assert out.returncode == 1, out.stdout + out.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    lines = out.stdout.splitlines()
    assert lines[0] == "run endpoint_failed" and lines[-1] == str(run_dir)
    said = re.fullmatch(
        r"Endpoint failed: (\d+) of (\d+) canaries failed \(connection ×(\d+); the first: connection.+\); "
        r"no completions at concurrency 2, 4\.",
        lines[1],
    )
    assert said is not None, lines
    errors, sent = int(said[1]), int(said[2])
    assert errors == int(said[3]) == 8 and sent == 14  # levels 2 and 4 (4 each) failed; 2 baseline + 4 at level 0 ok
    assert read_manifest(run_dir).status == "endpoint_failed"

    md = (run_dir / "report.md").read_text().splitlines()
    assert md[2] == f"**{lines[1]}**"  # right under the title, before any figure
    html = (run_dir / "report.html").read_text()
    assert html.index(lines[1]) < html.index("<table>")

    gate = clikit.loadgen("check", str(run_dir), "--max-unique", "1")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "FAIL  plain: every planned level has completions: no completions at concurrency 2, 4" in gate.stdout
    failed = "FAIL  error rate: the endpoint failed: 8 of 14 canaries failed (connection ×8; the first: connection"
    assert failed in gate.stdout
    assert "PASS  plain overall: max-unique 1" in gate.stdout  # the threshold alone would have passed
    relaxed = clikit.loadgen("check", str(run_dir), "--max-unique", "1", "--max-error-rate", "1")
    assert relaxed.returncode == 1 and "FAIL  plain: every planned level has completions" in relaxed.stdout


def test_records_that_cannot_be_written_change_the_status_and_are_counted(fault_server: str, tmp_path: Path) -> None:
    scenario = tmp_path / "big.toml"
    scenario.write_text(BIG.format(url=fault_server, prompt="x" * 7000))
    out = loadgen("run", str(scenario), "--out", str(tmp_path / "runs"), preexec_fn=_file_size_limit)
    assert out.returncode == 1, out.stdout + out.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert (run_dir / "canaries.jsonl").stat().st_size == LIMIT  # the limit was hit for real
    (process,) = run_dir.glob("process-*.json")
    counts = orjson.loads(process.read_bytes())
    written, failed = counts["canaries_written"], counts["canary_write_failures"]
    assert written + failed == 22 and failed > 0
    assert read_manifest(run_dir).status == "finished_with_losses"
    said = f"Records lost: {failed} canary records could not be written; canaries.jsonl ends in a torn line"
    assert out.stdout.splitlines()[0] == "run finished_with_losses"
    assert out.stdout.splitlines()[1].startswith(said)

    report = clikit.loadgen("report", str(run_dir))  # the torn last line is reported, not a crash
    assert report.returncode == 0, report.stderr
    data = orjson.loads((run_dir / "report.json").read_bytes())
    assert data["health"]["write_failures"]["canaries"] == failed and data["health"]["torn_files"] == ["canaries.jsonl"]
    assert data["input"]["records"] == written
    md = (run_dir / "report.md").read_text()
    assert md.splitlines()[2].startswith(f"**{said}") and f"> **Notice:** {said}" in md

    gate = clikit.loadgen("check", str(run_dir), "--max-unique", "1")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert f"FAIL  no records lost: {failed} record(s) could not be written; canaries.jsonl end(s) in a torn line" in (
        gate.stdout
    )


TINY = """
name = "tiny-dead"
[endpoint]
base_url = "{url}/dying/{key}/1"
read_timeout_s = 2
[[canaries]]
id = "plain"
prompt = "ok"
[sweep]
levels = [0]
canaries_per_level = {per_level}
warmup = 0
baseline = 1
"""


@pytest.mark.parametrize("per_level", [1, 2])
def test_a_tiny_run_whose_canaries_all_failed_is_not_finished(
    fault_server: str, tmp_path: Path, per_level: int
) -> None:
    """Fewer canaries than the "endpoint died" rule's three, every one failed: nothing was measured, so the
    run is ``endpoint_failed`` with exit 1, not ``finished`` with exit 0. (The probe is the one answer.)"""
    scenario = tmp_path / "s.toml"
    scenario.write_text(TINY.format(url=fault_server, key=uuid.uuid4().hex, per_level=per_level))
    out = loadgen("run", str(scenario), "--out", str(tmp_path / "runs"))
    (run_dir,) = (tmp_path / "runs").iterdir()
    manifest = read_manifest(run_dir)
    assert manifest.canaries_reported and manifest.canary_errors == manifest.canaries_reported, manifest
    assert out.returncode == 1 and manifest.status == "endpoint_failed", out.stdout + out.stderr
    assert "run endpoint_failed" in out.stdout
