"""``loadgen matrix``: one scenario over several engine configurations, ending in one comparison.

Why: the question "which setting removes the divergence?" needs the same study on each setting,
run the same way, read side by side (the D3 table: prefix caching on/off x batch invariance 0/1).
Each ``[matrix]`` cell is launcher overrides (args appended, env merged) or an external
``base_url``; each runs as a full ``loadgen run`` sweep, or as a cold-boot study when the scenario
has ``[cold_boot]``, into ``OUT/cells/<cell>/``. Then ``reports.compare_reports`` puts the cells'
reports side by side (``OUT/comparison.*``) and, for cold-boot matrices, ``OUT/matrix.md`` holds the
cell x canary table. A cell whose engine fails is recorded as failed and the others still run.
Raises ``LoadgenError`` subclasses for unusable input; prints nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.core.errors import EndpointError, EngineError, ScenarioError, UsageError
from loadgen.core.manifest import RunStatus
from loadgen.core.scenario import LauncherSpec, MatrixCell, Scenario, load_scenario
from loadgen.studies.coldboot import cold_boot
from loadgen.studies.events import CellEnded, CellStarted, Progress, no_progress
from loadgen.studies.run import run
from reports.coldboot import ColdBootSummary, matrix_table
from reports.compare import compare_reports, write_comparison
from reports.writer import load_report, report_json, write_text


@dataclass
class CellResult:
    name: str
    labels: dict[str, str]
    run_dir: Path | None
    status: RunStatus
    wall_s: float
    error: str | None = None
    coldboot: ColdBootSummary | None = None  # the cell's cold-boot summary


@dataclass
class MatrixResult:
    out_dir: Path
    mode: str  # "cold_boot" or "sweep"
    cells: list[CellResult]

    @property
    def ok(self) -> bool:
        return all(c.status == RunStatus.FINISHED for c in self.cells)


def cell_launcher(base: LauncherSpec | None, cell: MatrixCell) -> LauncherSpec | None:
    """The cell's engine: the scenario's launcher (else the embedded engine) plus the cell's args and env."""
    if cell.base_url is not None:
        return None
    spec = base or LauncherSpec()
    data = spec.model_dump()
    data["args"] = [*spec.args, *cell.args]
    data["env"] = {**spec.env, **cell.env}
    return LauncherSpec.model_validate(data)


def check_matrix(scenario: Scenario, source: str, only: list[str] | None = None) -> list[MatrixCell]:
    """The cells (those named in ``only``, in the scenario's order), after the checks that need the whole
    scenario; fails before any engine starts."""
    if scenario.matrix is None:
        raise ScenarioError(f"{source}: no [matrix] section: add [[matrix.cells]] tables (a name and args/env each)")
    cells = scenario.matrix.cells
    if only is not None:
        known = [c.name for c in cells]
        unknown = [name for name in only if name not in known]
        if unknown or not only:
            raise UsageError(f"--cells: {', '.join(unknown) or '(none)'} not in {source}; its cells are {known}")
        cells = [c for c in cells if c.name in only]
    for i, cell in enumerate(cells):
        if cell.base_url is None and scenario.endpoint.base_url is not None:
            raise ScenarioError(
                f"{source}: field matrix.cells[{i}]: endpoint.base_url is set, so this cell would not start its "
                "own engine; remove endpoint.base_url (cells start engines) or give the cell a base_url"
            )
        if cell.base_url is not None and scenario.cold_boot is not None:
            raise ScenarioError(
                f"{source}: field matrix.cells[{i}].base_url: a cold-boot study restarts its engine, which an "
                "external endpoint does not allow; give the cell args/env for the launcher instead"
            )
    return cells


def _run_cell(
    scenario_path: Path,
    scenario: Scenario,
    cell: MatrixCell,
    out_dir: Path,
    opts: dict[str, Any],
    progress: Progress = no_progress,
) -> CellResult:
    labels = {**opts.get("labels", {}), "cell": cell.name, **cell.labels}
    launcher = cell_launcher(scenario.launcher, cell)
    cell_out = out_dir / "cells" / cell.name
    t0 = time.monotonic()
    try:
        if scenario.cold_boot is not None:
            cb = cold_boot(
                scenario_path,
                out_dir=cell_out,
                boots=opts.get("boots"),
                requests=opts.get("requests"),
                labels=labels,
                launcher=launcher,
                progress=progress,
            )
            return CellResult(cell.name, labels, cb.run_dir, cb.status, time.monotonic() - t0, coldboot=cb.summary)
        res = run(
            scenario_path,
            host=cell.base_url,
            out_dir=cell_out,
            levels=opts.get("levels"),
            canaries_per_level=opts.get("canaries_per_level"),
            labels=labels,
            launcher=launcher,
            processes=opts.get("processes", 0),
            progress=progress,
        )
        assert res.status is not None  # a headless run always ends with a status
        return CellResult(cell.name, labels, res.run_dir, res.status, time.monotonic() - t0)
    except (EngineError, EndpointError) as exc:  # this cell's engine; the other cells may still run
        return CellResult(cell.name, labels, None, RunStatus.FAILED, time.monotonic() - t0, error=str(exc))


def run_matrix(
    scenario_path: Path,
    *,
    out_dir: Path,
    boots: int | None = None,
    requests: int | None = None,
    levels: list[int] | None = None,
    canaries_per_level: int | None = None,
    labels: dict[str, str] | None = None,
    processes: int = 0,
    only: list[str] | None = None,
    progress: Progress = no_progress,
) -> MatrixResult:
    """Run every cell of ``scenario_path``'s ``[matrix]`` (or those named in ``only``) in order, then write the
    comparison into ``out_dir``. ``progress`` hears each cell's start and end and, in between, the cell's own
    run or cold-boot events (``loadgen.studies.events``); it must not raise."""
    source = str(scenario_path)
    scenario = load_scenario(scenario_path)
    cells = check_matrix(scenario, source, only)
    opts = {
        "boots": boots,
        "requests": requests,
        "levels": levels,
        "canaries_per_level": canaries_per_level,
        "labels": labels or {},
        "processes": processes,
    }
    results = []
    for index, cell in enumerate(cells, start=1):
        progress(CellStarted(index, len(cells), cell.name))
        done = _run_cell(scenario_path, scenario, cell, out_dir, opts, progress)
        progress(CellEnded(index, len(cells), cell.name, done.status, done.wall_s))
        results.append(done)
    result = MatrixResult(out_dir, "cold_boot" if scenario.cold_boot else "sweep", results)
    write_matrix(result, scenario)
    return result


def write_matrix(result: MatrixResult, scenario: Scenario) -> list[Path]:
    out = result.out_dir
    out.mkdir(parents=True, exist_ok=True)
    done = [(c.name, load_report(c.run_dir)) for c in result.cells if c.run_dir is not None]
    paths = write_comparison(compare_reports(done), done, out) if len(done) >= 2 else []
    cells = [
        {
            "name": c.name,
            "labels": c.labels,
            "run_dir": None if c.run_dir is None else str(c.run_dir),
            "status": c.status,
            "wall_s": round(c.wall_s, 3),
            "error": c.error,
            "coldboot": c.coldboot,
        }
        for c in result.cells
    ]
    summary = {"schema": 1, "scenario": scenario.name, "mode": result.mode, "cells": cells}
    write_text(out / "matrix.json", report_json(summary))
    write_text(out / "matrix.md", render_matrix(result, scenario))
    return [*paths, out / "matrix.json", out / "matrix.md"]


def render_matrix(result: MatrixResult, scenario: Scenario) -> str:
    total = sum(c.wall_s for c in result.cells)
    lines = [
        f"## Engine matrix: {scenario.name} ({result.mode.replace('_', ' ')}, {total:.0f} s in all)",
        "",
        "| cell | labels | status | wall s | run folder |",
        "|---|---|---|---:|---|",
    ]
    for c in result.cells:
        labels = ", ".join(f"{k}={v}" for k, v in c.labels.items())
        where = "—" if c.run_dir is None else f"`{c.run_dir}`"
        lines.append(f"| {c.name} | {labels} | {c.status} | {c.wall_s:.1f} | {where} |")
    failed = [c for c in result.cells if c.error]
    for c in failed:
        lines += ["", f"Cell {c.name} failed:", "", "```", c.error or "", "```"]
    boots = [(c.name, c.coldboot) for c in result.cells if c.coldboot is not None]
    if boots:
        first = boots[0][1]
        lines += [
            "",
            "### First request after a cold boot versus the rest",
            "",
            f"{first['boots']} boots per cell, {first['requests_per_boot']} one-at-a-time requests per canary "
            'per boot. "first differs, rest agree": boots where request 1 differs from requests 2..N and '
            'those agree; "distinct first / warm": distinct request-1 and request-2..N completions across '
            "boots.",
            "",
            matrix_table(boots).rstrip(),
        ]
    lines += ["", "Cells side by side: `comparison.md` (and `.html`, `.json`) in this folder."]
    return "\n".join(lines) + "\n"
