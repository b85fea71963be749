"""Through the real CLI: a P/D study whose router cannot be imported is refused before any engine starts,
naming the extra that installs it.

The router package is hidden by one of the same name first on ``PYTHONPATH`` whose import fails, as a missing
package's does; the command must end in one line naming ``[pd]``, with no cell run and no engine started.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _without_router(tmp_path: Path) -> dict[str, str]:
    hidden = tmp_path / "hide" / "vllm_router"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('No module named vllm_router')\n")
    path = os.pathsep.join(p for p in (str(hidden.parent), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


@pytest.mark.parametrize("command", ["matrix", "run"])
def test_a_missing_router_is_refused_before_any_engine_names_the_extra(command: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "loadgen", command, "pd-embedded", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_without_router(tmp_path),
    )
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"loadgen {command}: error: ") and "vllm_router" in line, line
    assert "pip install 'batch-invariance-loadgen[pd]'" in line
    if command == "matrix":  # every P/D cell is named, and none ran
        assert "pd-same-kernel, pd-foreign-prefill" in line
    assert not out.exists() or not list(out.rglob("*.log"))  # no engine, router or cell started
