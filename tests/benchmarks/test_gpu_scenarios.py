"""The GPU scripts' scenario files load: a typo there would cost device time before anything ran.

Every ``benchmarks/{vllm,vllm_why,vllm_offload,sglang,h200}/*.toml`` goes through the tool's own scenario loader, as
``loadgen run`` and ``loadgen matrix`` read it on the GPU machine."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from loadgen.core.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
DIRS = ("vllm", "vllm_why", "vllm_offload", "sglang", "h200")
FILES = sorted(p for d in DIRS for p in (ROOT / "benchmarks" / d).glob("*.toml"))


def test_there_are_gpu_scenarios() -> None:
    assert len(FILES) >= 8


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_gpu_scenario_loads(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.name and scenario.canaries
    if scenario.matrix is not None:
        names = [c.name for c in scenario.matrix.cells]
        assert len(names) == len(set(names)) and scenario.launcher is not None


def test_the_lmcache_scenario_the_offload_script_writes_loads(tmp_path: Path) -> None:
    """``vllm_offload_h200.sh lmcache-scenario`` writes the LMCache cells' file on the GPU machine: it loads, keeps
    offload.toml's canaries and load, has no tier of vLLM's own, and each cell asks for LMCacheConnectorV1."""
    env = {**os.environ, "RESULTS": str(tmp_path / "r"), "OUT": str(tmp_path / "o"), "LMCACHE_PER_LEVEL": "4"}
    script = ROOT / "benchmarks" / "vllm_offload_h200.sh"
    done = subprocess.run(["bash", str(script), "lmcache-scenario"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    written = load_scenario(tmp_path / "r" / "scenario-files" / "lmcache.toml")
    offload = load_scenario(ROOT / "benchmarks" / "vllm_offload" / "offload.toml")
    assert written.name == "vllm-lmcache" and written.canaries == offload.canaries
    assert written.sweep.levels == offload.sweep.levels and written.sweep.canaries_per_level == 4
    assert written.launcher is not None and written.launcher.kv_offload is None and written.matrix is not None
    cells = {c.name: c for c in written.matrix.cells}
    assert sorted(cells) == ["lmcache-bi0", "lmcache-bi1"] and cells["lmcache-bi0"].compare_to == "lmcache-bi1"
    for name, cell in cells.items():
        config = json.loads(cell.args[cell.args.index("--kv-transfer-config") + 1])
        assert config == {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"} and cell.kv_offload is False
        assert cell.env["VLLM_BATCH_INVARIANT"] == name[-1] and cell.env["LMCACHE_LOCAL_CPU"] == "True"
