import subprocess
import sys
from pathlib import Path


def loadgen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loadgen", *args], capture_output=True, text=True, timeout=60)


def test_serve_help_is_the_engines() -> None:
    out = loadgen("serve", "--help")
    assert out.returncode == 0 and "--batch-invariant" in out.stdout and "--max-num-seqs" in out.stdout


def test_library_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    out = loadgen("run", str(tmp_path / "missing.toml"))
    assert out.returncode == 2
    assert out.stderr.startswith("loadgen run: error: ") and "missing.toml: cannot read scenario file" in out.stderr
    assert "Traceback" not in out.stderr
