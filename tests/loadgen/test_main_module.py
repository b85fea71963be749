"""``python -m loadgen`` from a folder that holds a user's own ``scenarios/`` and ``reports/``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_a_users_scenarios_and_reports_folders_do_not_shadow_the_projects_packages(tmp_path: Path) -> None:
    for name in ("scenarios", "reports"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise ImportError('the user folder was imported')\n")
    (tmp_path / "scenarios" / "mine.toml").write_text('name = "mine"\n[[canaries]]\nprompt = "hi"\n')
    got = subprocess.run(
        [sys.executable, "-m", "loadgen", "matrix", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert got.returncode == 0, got.stderr
    assert "a shipped one: cold-boot" in " ".join(got.stdout.split())
