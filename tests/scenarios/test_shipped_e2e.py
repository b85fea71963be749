"""Every shipped scenario runs on a fresh embedded engine with no canary error, through the real CLI.

Why: a scenario whose requests do not fit the engine it starts (``tm-burst``'s 1,000-token answer on a 512-token
engine) fails every canary after a whole run's wait. Each scenario here runs as it ships (its endpoint, launcher,
canaries and background), shortened: levels 0 and 2, two canaries per level, one baseline, a burst of three
(not two: a burst must not equal a level), no warm-up. Its canaries must all complete, and its background must
not be refused.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scenarios import names, path_of
from tests.loadgen.cli import clikit


def shortened(name: str, folder: Path) -> Path:
    """The shipped scenario with a shorter sweep (``--levels`` and ``--canaries-per-level`` shorten the rest)."""
    text = path_of(name).read_text()
    for key, value in (("baseline", 1), ("burst", 3), ("warmup", 0)):
        text = re.sub(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.M)
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", names())
def test_a_shipped_scenario_runs_on_the_embedded_engine(name: str, tmp_path: Path) -> None:
    scenario = shortened(name, tmp_path)
    done = clikit.loadgen_run(scenario, tmp_path / "runs", "--levels", "0,2", "--canaries-per-level", "2", timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    health = json.loads((done.run_dir / "report.json").read_text())["health"]
    assert health["errors"] == 0 and health["canaries"] > 0, health
    background = health["background"]
    assert background is None or background["errors"] == 0, background
