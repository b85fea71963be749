"""``loadgen matrix`` run for real (a subprocess) when a cell's engine fails to start: the other cells still run,
the failed cell keeps its engine log in its own folder, and matrix.md points at that kept log. ``--cells``
runs a subset and rejects unknown names before any engine starts."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import orjson

MARKER = "boom-marker-7f3a"

# One launcher command for every cell: with FAIL set it prints the marker to stderr and exits 3 before
# serving; without it, it runs the embedded engine. {port} is the launcher's free port. The marker is
# printed in two halves, so that it appears in a log only as the engine's output, never as its command.
COMMAND = (
    'touch "$STARTED_DIR/$CELL"; if [ -n "$FAIL" ]; then printf "%s-%s\\n" boom marker-7f3a >&2; exit 3; fi; '
    f"exec {sys.executable} -m loadgen.engine --port {{port}}"
)


def scenario(tmp_path: Path, *, cold_boot: bool) -> Path:
    started = tmp_path / "started"
    started.mkdir()
    study = (
        "[cold_boot]\nboots = 1\nrequests = 2\n"
        if cold_boot
        else ("[sweep]\nlevels = [0]\ncanaries_per_level = 2\nwarmup = 0\n")
    )
    path = tmp_path / "m.toml"
    path.write_text(
        f"""
name = "m"
[[canaries]]
id = "c"
prompt = "hello"
max_tokens = 4
{study}
[launcher]
kind = "command"
command = '{COMMAND}'
ready_timeout_s = 30
env = {{ STARTED_DIR = "{started}" }}

[[matrix.cells]]
name = "bad"
env = {{ FAIL = "1", CELL = "bad" }}
labels = {{ side = "broken" }}

[[matrix.cells]]
name = "good"
env = {{ CELL = "good" }}
"""
    )
    return path


def matrix(scenario_path: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen", "matrix", str(scenario_path), "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=180,
    )


def started(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "started").iterdir())


def assert_failed_cell_kept_its_log(out: Path, proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 1, proc.stderr
    cell = out / "cells" / "bad"
    log = cell / "engine.log"
    assert MARKER in log.read_text().splitlines()  # the engine's own stderr, kept where the user looks
    failed = (cell / "engine-failed.txt").read_text()
    assert "exited with code 3" in failed
    assert "command: " in failed and "FAIL=1" in failed and MARKER in failed  # the command that failed
    assert str(log) in failed
    assert not list(out.rglob(".loadgen-engine-*")) and not list(out.rglob("loadgen-coldboot-*"))

    md = (out / "matrix.md").read_text()
    assert "| bad | cell=bad, side=broken | failed |" in md
    assert "Cell bad failed:" in md and MARKER in md
    logs = re.findall(r"\S*engine\.log", md)
    assert f"({log}):" in md and logs
    for mentioned in logs:  # every log matrix.md names still exists: none is a removed temporary file
        assert Path(mentioned.strip("()`:")).is_file(), mentioned
    assert ".loadgen-engine-" not in md and "loadgen-coldboot-" not in md

    summary = orjson.loads((out / "matrix.json").read_bytes())
    cells = {c["name"]: c for c in summary["cells"]}
    assert cells["bad"]["status"] == "failed" and cells["bad"]["run_dir"] is None
    assert str(log) in cells["bad"]["error"] and MARKER in cells["bad"]["error"]
    assert cells["good"]["status"] == "finished"  # the failed cell did not stop the others
    good_dir = Path(cells["good"]["run_dir"])
    assert good_dir.parent == out / "cells" / "good" and (good_dir / "engine.log").is_file()
    assert MARKER not in (good_dir / "engine.log").read_text()
    assert "| good | cell=good | finished |" in proc.stdout  # matrix.md is printed too


def test_a_failed_sweep_cell_keeps_its_engine_log_and_the_others_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = matrix(scenario(tmp_path, cold_boot=False), out)
    assert_failed_cell_kept_its_log(out, proc)
    assert orjson.loads((out / "matrix.json").read_bytes())["mode"] == "sweep"
    assert started(tmp_path) == ["bad", "good"]


def test_a_failed_cold_boot_cell_keeps_its_engine_log_the_same_way(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = matrix(scenario(tmp_path, cold_boot=True), out)
    assert_failed_cell_kept_its_log(out, proc)
    summary = orjson.loads((out / "matrix.json").read_bytes())
    assert summary["mode"] == "cold_boot"
    good = next(c for c in summary["cells"] if c["name"] == "good")
    assert good["coldboot"] is not None and (Path(good["run_dir"]) / "coldboot.json").is_file()


def test_cells_runs_only_the_named_cell(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = matrix(scenario(tmp_path, cold_boot=False), out, "--cells", "bad")
    assert proc.returncode == 1, proc.stderr
    summary = orjson.loads((out / "matrix.json").read_bytes())
    assert [c["name"] for c in summary["cells"]] == ["bad"]
    assert started(tmp_path) == ["bad"]  # the other cell's engine never started
    assert sorted(p.name for p in (out / "cells").iterdir()) == ["bad"]
    assert MARKER in (out / "cells" / "bad" / "engine.log").read_text()


def test_unknown_cells_exit_2_before_any_engine_starts(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = matrix(scenario(tmp_path, cold_boot=False), out, "--cells", "good,nosuch")
    assert proc.returncode == 2
    assert "nosuch" in proc.stderr and "--cells" in proc.stderr
    assert "'bad'" in proc.stderr and "'good'" in proc.stderr  # the cells it does know
    assert started(tmp_path) == []
    assert not out.exists()
