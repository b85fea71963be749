"""benchmarks/h200_common.sh: where the second mode goes on the GPU count the machine lends.

The GPU scripts put the second mode (and the second share of a matrix) on GPU 1 where there is one and
share GPU 0 otherwise; this drives the sourced functions with an ``nvidia-smi`` that lists N GPUs."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _with_gpus(tmp_path: Path, n: int | None) -> dict[str, str]:
    """An environment whose ``nvidia-smi -L`` lists ``n`` GPUs (None: no ``nvidia-smi`` at all)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if n is not None:
        lines = "".join(f"echo 'GPU {i}: NVIDIA H200 (UUID: GPU-{i})'\n" for i in range(n))
        fake = bin_dir / "nvidia-smi"
        fake.write_text(f"#!/bin/sh\n{lines}")
        fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    path = f"{bin_dir}:/usr/bin:/bin"
    return {**os.environ, "PATH": path, "RESULTS": str(tmp_path / "r"), "OUT": str(tmp_path / "o")}


@pytest.mark.parametrize(("gpus", "count", "second"), [(None, "0", "0"), (1, "1", "0"), (2, "2", "1"), (8, "8", "1")])
def test_second_mode_on_gpu_1_where_there_is_one(tmp_path: Path, gpus: int | None, count: str, second: str) -> None:
    script = f". {ROOT / 'benchmarks' / 'h200_common.sh'}; gpu_count; second_gpu"
    done = subprocess.run(
        ["bash", "-c", script], env=_with_gpus(tmp_path, gpus), capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [count, second]
