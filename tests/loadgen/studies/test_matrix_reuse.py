"""``loadgen matrix --reuse``: shares of one matrix run side by side (``--cells``) into one folder, compared after."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from loadgen.core.errors import UsageError
from loadgen.studies.matrix import run_matrix


def _scenario(tmp_path: Path, url: str) -> Path:
    cells = "".join(f'[[matrix.cells]]\nname = "{name}"\nbase_url = "{url}"\n{extra}' for name, extra in CELLS)
    path = tmp_path / "m.toml"
    path.write_text(
        'name = "m"\n[[canaries]]\nid = "c"\nprompt = "hello"\nmax_tokens = 4\n'
        "[sweep]\nlevels = [0, 1]\ncanaries_per_level = 2\nwarmup = 0\nbaseline = 1\n" + cells
    )
    return path


CELLS = [("a", ""), ("b", ""), ("c", 'compare_to = "b"\n')]


def _matrix(*args: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "loadgen", "matrix", *args, "--quiet"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _runs(out: Path) -> list[Path]:
    return sorted(p.parent for p in out.glob("cells/*/*/manifest.json"))


def test_shares_run_side_by_side_then_reuse_compares_every_cell_without_running_one_again(
    fault_server: str, tmp_path: Path
) -> None:
    scenario, out = _scenario(tmp_path, fault_server), tmp_path / "out"
    shares = [_matrix(str(scenario), "--out", str(out), "--cells", cells) for cells in ("a", "b,c")]
    for share in shares:
        _, err = share.communicate(timeout=120)
        assert share.returncode == 0, err.decode()
    before = {p: (p / "report.json").stat().st_mtime_ns for p in _runs(out)}
    assert len(before) == 3
    # each share wrote a comparison of its own cells only; the last one to finish overwrote the other's
    joined = _matrix(str(scenario), "--out", str(out), "--reuse")
    stdout, err = joined.communicate(timeout=120)
    assert joined.returncode == 0, err.decode()
    assert {p: (p / "report.json").stat().st_mtime_ns for p in _runs(out)} == before  # nothing ran again
    cmp = orjson.loads((out / "comparison.json").read_bytes())
    assert [r["name"] for r in cmp["runs"]] == ["a", "b", "c"]
    assert {(r["run"], r["compared_with"]) for r in cmp["references"]} == {("b", "a"), ("c", "b")}
    assert "| c | cell=c | finished | reused |" in stdout.decode()
    matrix = orjson.loads((out / "matrix.json").read_bytes())
    assert [c["run_dir"] for c in matrix["cells"]] == [str(p) for p in sorted(before, key=lambda p: p.parent.name)]


def test_reuse_runs_the_cells_that_have_no_reported_run_yet(fault_server: str, tmp_path: Path) -> None:
    scenario, out = _scenario(tmp_path, fault_server), tmp_path / "out"
    first = run_matrix(scenario, out_dir=out, only=["a"])
    (kept,) = _runs(out)
    again = run_matrix(scenario, out_dir=out, reuse=True)
    assert again.ok and [c.name for c in again.cells] == ["a", "b", "c"]
    assert again.cells[0].run_dir == first.cells[0].run_dir == kept and len(_runs(out)) == 3


def test_reuse_refuses_a_cold_boot_matrix(tmp_path: Path) -> None:
    scenario = tmp_path / "m.toml"
    scenario.write_text(
        'name = "m"\n[[canaries]]\nprompt = "hi"\n[cold_boot]\n'
        '[[matrix.cells]]\nname = "a"\n[[matrix.cells]]\nname = "b"\n'
    )
    with pytest.raises(UsageError, match=r"m.toml: --reuse compares sweep cells; a cold-boot matrix runs its boots"):
        run_matrix(scenario, out_dir=tmp_path / "out", reuse=True)
    assert not (tmp_path / "out").exists()
