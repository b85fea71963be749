"""The GPU scripts' scenario files load: a typo there would cost device time before anything ran.

Every ``benchmarks/{vllm,vllm_why,vllm_offload,sglang,h200}/*.toml`` goes through the tool's own scenario loader, as
``loadgen run`` and ``loadgen matrix`` read it on the GPU machine."""

from __future__ import annotations

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
