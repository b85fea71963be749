"""The studies tell their progress through the callback, in order, and ``loadgen matrix`` and ``coldboot`` show it
in a log (standard error not a terminal): cell k of n, boot j of m, each engine's start time, and a boot's
requests once they are all back (with a line every ``PLAIN_EVERY_S`` while they go), never a line per request."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from loadgen.core.manifest import BootFacts
from loadgen.studies.events import (
    BootRequest,
    BootStarted,
    CellEnded,
    CellStarted,
    EngineReady,
    LoadEnded,
    LoadStarted,
    Probing,
    ProgressEvent,
)
from loadgen.studies.matrix import run_matrix

COLD_BOOT_MATRIX = """
name = "m"
[[canaries]]
id = "c"
prompt = "The old man climbed the green hill near the old town before the long night, so"
max_tokens = 4
[cold_boot]
boots = 2
requests = 2
[[matrix.cells]]
name = "plain"
[[matrix.cells]]
name = "invariant"
args = ["--batch-invariant"]
"""


def test_a_sweep_matrix_tells_each_cell_and_its_run_in_order(fault_server: str, tmp_path: Path) -> None:
    scenario = tmp_path / "m.toml"
    scenario.write_text(f"""
name = "m"
[[canaries]]
id = "c"
prompt = "hello"
max_tokens = 4
[sweep]
levels = [0]
canaries_per_level = 2
warmup = 0
baseline = 1
[[matrix.cells]]
name = "one"
base_url = "{fault_server}"
[[matrix.cells]]
name = "two"
base_url = "{fault_server}"
""")
    events: list[ProgressEvent] = []
    result = run_matrix(scenario, out_dir=tmp_path / "out", progress=events.append)
    assert result.ok
    kinds = [type(e).__name__ for e in events]
    one_cell = ["CellStarted", "Probing", "LoadStarted", "LoadEnded", "CellEnded"]
    assert kinds == one_cell * 2  # external endpoints: no engine started
    started = [e for e in events if isinstance(e, CellStarted)]
    assert [(e.index, e.cells, e.name) for e in started] == [(1, 2, "one"), (2, 2, "two")]
    loads = [e for e in events if isinstance(e, LoadStarted)]
    assert [e.run_dir for e in loads] == [c.run_dir for c in result.cells]
    assert loads[0].scenario.sweep.levels == [0] and loads[0].scenario.endpoint.base_url == fault_server
    assert all(e.base_url == fault_server for e in events if isinstance(e, Probing))
    ended = [e for e in events if isinstance(e, CellEnded)]
    assert [(e.name, e.status) for e in ended] == [("one", "finished"), ("two", "finished")]
    assert all(e.wall_s > 0 for e in ended)
    assert all(e.reporting for e in events if isinstance(e, LoadEnded))


def test_matrix_shows_cells_boots_engine_start_times_and_requests(tmp_path: Path) -> None:
    scenario = tmp_path / "m.toml"
    scenario.write_text(COLD_BOOT_MATRIX)
    out = subprocess.run(
        [sys.executable, "-m", "loadgen", "matrix", str(scenario), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr
    err = out.stderr.splitlines()
    assert out.stdout.startswith("## Engine matrix: m (cold boot")  # stdout: the matrix table, then its folder
    assert out.stdout.splitlines()[-1] == str(tmp_path / "out")
    for k, name in ((1, "plain"), (2, "invariant")):
        at = f"cell {k} of 2 ({name}): "
        assert f"cell {k} of 2: {name}" in err
        for j in (1, 2):
            boot = f"{at}boot {j} of 2: "
            start = err.index(f"{boot}starting the engine ...")
            ready = next(i for i, line in enumerate(err) if line.startswith(f"{boot}engine ready at http://"))
            assert re.fullmatch(rf"{re.escape(boot)}engine ready at http://127\.0\.0\.1:\d+ in \d+\.\d s", err[ready])
            assert start < ready < err.index(f"{boot}2 of 2 requests back")
        assert re.search(rf"^cell {k} of 2: {name} finished in 0:\d\d$", out.stderr, re.M)
    assert err.index("cell 1 of 2: plain") < err.index("cell 2 of 2: invariant")
    assert not [line for line in err if re.search(r"request \d+ of", line)]  # a log gets no line per request


def test_a_cold_boot_in_a_log_prints_lines_per_boot_not_per_request(tmp_path: Path) -> None:
    """``loadgen coldboot`` with standard error captured, as a CI log has it: the lines grow with the boots, not
    with the requests (24 here, which a line per request would print 24 of)."""
    scenario = tmp_path / "m.toml"
    scenario.write_text(COLD_BOOT_MATRIX)
    cmd = [sys.executable, "-m", "loadgen", "coldboot", str(scenario), "--out", str(tmp_path / "cb")]
    out = subprocess.run([*cmd, "--boots", "2", "--requests", "12"], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    (run_dir,) = (tmp_path / "cb").iterdir()
    requests = len((run_dir / "canaries.jsonl").read_text().splitlines())
    err = out.stderr.splitlines()
    assert requests == 24 and len(err) < requests / 2, out.stderr
    for j in (1, 2):
        boot = f"boot {j} of 2: "
        start, done = err.index(f"{boot}starting the engine ..."), err.index(f"{boot}12 of 12 requests back")
        assert all(line.startswith(boot) for line in err[start : done + 1])
        between = err[start + 2 : done]  # after "engine ready": only the lines of a boot that took 10 s or more
        assert len(between) <= 1 and all(re.fullmatch(rf"{boot}\d+ of 12 requests back", x) for x in between)
    assert err[-1] == "boot 2 of 2: writing the reports ..."


def test_quiet_cold_boot_shows_no_progress(tmp_path: Path) -> None:
    scenario = tmp_path / "m.toml"
    scenario.write_text(COLD_BOOT_MATRIX.replace("boots = 2", "boots = 1"))
    cold = subprocess.run(
        [sys.executable, "-m", "loadgen", "coldboot", str(scenario), "--out", str(tmp_path / "cb"), "--quiet"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert cold.returncode == 0 and cold.stderr == "", cold.stderr
    (run_dir,) = (tmp_path / "cb").iterdir()
    assert cold.stdout.splitlines()[-1] == str(run_dir)  # the last line, after the cold-boot table


def test_cold_boot_events_count_every_request_of_every_boot(tmp_path: Path) -> None:
    from loadgen.studies.coldboot import cold_boot

    scenario = tmp_path / "m.toml"
    scenario.write_text(COLD_BOOT_MATRIX)
    events: list[ProgressEvent] = []
    result = cold_boot(scenario, out_dir=tmp_path / "cb", boots=2, requests=3, progress=events.append)
    assert result.status == "finished"
    boots = [(e.boot, e.boots) for e in events if isinstance(e, BootStarted)]
    assert boots == [(1, 2), (2, 2)]
    requests = [(e.boot, e.done, e.total, e.ok) for e in events if isinstance(e, BootRequest)]
    assert requests == [(b, i, 3, True) for b in (1, 2) for i in (1, 2, 3)]
    ready = [e for e in events if isinstance(e, EngineReady)]
    assert len(ready) == 2 and all(e.seconds > 0 for e in ready)
    assert [round(e.seconds, 3) for e in ready] == [b["ready_s"] for b in result_boots(result.run_dir)]
    assert isinstance(events[-1], LoadEnded) and events[-1].run_dir == result.run_dir


def result_boots(run_dir: Path) -> list[BootFacts]:
    from loadgen.core.manifest import read_manifest

    return list(read_manifest(run_dir).boots or [])
