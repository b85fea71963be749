"""Importing the Locust side loads no report stack: no pandas, no pyarrow, no ``reports.analysis.build``, no renderer.

Why: every Locust process and worker imports ``loadgen/load/locustfile.py``; the report is written
once, by the process that owns the run, when the run is over (``loadgen/runs/lifecycle.py``). A fresh
interpreter imports the locustfile as Locust would and lists what it loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
REPORT_STACK = (
    "pandas",
    "pyarrow",
    "collectors.read",
    "reports.analysis.build",
    "reports.render.writer",
    "reports.render.md",
    "reports.render.html",
)
LIST_MODULES = "import json, sys; import {module}; print(json.dumps(sorted(sys.modules)))"


def loaded_by(module: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", LIST_MODULES.format(module=module)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return set(json.loads(out.stdout.splitlines()[-1]))


def report_stack(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == top or m.startswith(top + ".") for top in REPORT_STACK))


def test_the_locustfile_loads_no_report_stack() -> None:
    modules = loaded_by("loadgen.load.locustfile")
    assert "locust" in modules and "loadgen.runs.lifecycle" in modules  # it did import the Locust side
    assert report_stack(modules) == []


def test_the_check_sees_the_report_stack_where_it_is() -> None:
    assert "pandas" in report_stack(loaded_by("reports.render.writer"))


def test_no_load_module_shadows_the_standard_library() -> None:
    """Locust puts the locustfile's folder first on ``sys.path`` while it imports it (docs/design.md, "Locust
    traps"): a ``loadgen/load/queue.py`` would then be what ``import queue`` finds."""
    names = {p.stem for p in (ROOT / "loadgen" / "load").glob("*.py")}
    assert sorted(names & sys.stdlib_module_names) == []
