"""The ``--backend`` seam of ``loadgen serve``: the CPU engine never imports torch, and asking for the
GPU backend where torch is missing ends with a message that names it (no traceback)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from loadgen.engine.cli import build_parser

HAS_TORCH = importlib.util.find_spec("torch") is not None


def test_backend_defaults_to_cpu_and_accepts_gpu() -> None:
    p = build_parser()
    assert p.parse_args([]).backend == "cpu"
    args = p.parse_args(["--backend", "gpu", "--checkpoint", "/models/x"])
    assert args.backend == "gpu"
    assert str(args.checkpoint) == "/models/x"
    with pytest.raises(SystemExit):
        p.parse_args(["--backend", "tpu"])


def test_cpu_engine_import_does_not_pull_torch() -> None:
    code = (
        "import sys, loadgen.engine.cli, loadgen.engine.server; "
        "print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.skipif(HAS_TORCH, reason="torch is installed here: the missing-torch path cannot be exercised")
def test_gpu_backend_without_torch_exits_with_a_message() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen.engine", "--backend", "gpu", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "needs torch and transformers" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "READY" not in proc.stdout
