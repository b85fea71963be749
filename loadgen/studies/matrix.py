"""``loadgen matrix``: one scenario over several engine configurations, ending in one comparison.

Why: the question "which setting removes the divergence?" needs the same study on each setting,
run the same way, read side by side (the D3 table: prefix caching on/off x batch invariance 0/1).
Each ``[matrix]`` cell is launcher overrides (args appended, env merged) or an external
``base_url``; with a ``[topology]`` (or its own ``topology``) a cell is a colocated engine, a
prefill/decode pair behind the router or an engine reloading its own KV, each side with its own
overrides (``prefill``, ``decode``). Each runs as a full ``loadgen run`` sweep, or as a cold-boot study
when the scenario has ``[cold_boot]``, into ``OUT/cells/<cell>/``; a cell with ``decoder_direct`` also
asks its decode server directly before and after its sweep (``loadgen.studies.decoder_direct``). Then
``reports.compare_reports`` puts the cells' reports (and phases) side by side (``OUT/comparison.*``),
each cell's reference completions against those of the first cell (or its ``compare_to``) and, for
cold-boot matrices, ``OUT/matrix.md`` holds the cell x canary table. A cell whose engine fails is
recorded as failed and the others still run. Raises ``LoadgenError`` subclasses for unusable input;
prints nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from loadgen.core.errors import EndpointError, EngineError, ScenarioError, UsageError
from loadgen.core.manifest import MANIFEST, EngineFacts, RunStatus, read_manifest
from loadgen.core.request import RunRequest
from loadgen.core.scenario import (
    LauncherSpec,
    MatrixCell,
    Scenario,
    Server,
    Side,
    TopologyMode,
    TopologySpec,
    check_topology,
    load_scenario,
)
from loadgen.launchers.router_check import require_routers
from loadgen.studies.coldboot import cold_boot
from loadgen.studies.decoder_direct import BEFORE, DIRECT, SWEEP, Phase, run_phases
from loadgen.studies.events import CellEnded, CellStarted, Progress, no_progress
from loadgen.studies.run import RunResult, run
from reports.analysis.coldboot import ColdBootSummary, matrix_table
from reports.compare.runs import compare_reports, write_comparison
from reports.render.writer import load_report, report_json, write_text


@dataclass
class CellResult:
    name: str
    labels: dict[str, str]
    run_dir: Path | None
    status: RunStatus
    wall_s: float
    error: str | None = None
    coldboot: ColdBootSummary | None = None  # the cell's cold-boot summary
    compare_to: str | None = None  # the cell whose reference completions this one's are compared with
    phases: list[Phase] = field(default_factory=list)  # decoder_direct: the phases beside the sweep's run
    reused: bool = False  # an earlier run's, compared as it was (``--reuse``): no wall time of this matrix

    def columns(self, first: str) -> list[tuple[str, Path, str]]:
        """This cell's runs in the comparison: (name, run folder, the name it is compared with)."""
        base = self.compare_to or first
        if self.run_dir is None:
            return []
        out = [(self.name, self.run_dir, base)]
        for p in self.phases:  # in the order they ran: the one before the sweep first
            against = base if p.name == BEFORE else f"{self.name}/{BEFORE}"
            out.insert(len(out) - 1 if p.name == BEFORE else len(out), (f"{self.name}/{p.name}", p.run_dir, against))
        return out


@dataclass
class MatrixResult:
    out_dir: Path
    mode: str  # "cold_boot" or "sweep"
    cells: list[CellResult]

    @property
    def ok(self) -> bool:
        return all(c.status == RunStatus.FINISHED for c in self.cells)


def cell_mode(scenario: Scenario, cell: MatrixCell) -> TopologyMode:
    """The cell's topology mode: its own, else the scenario's ``[topology]``'s, else colocated."""
    return cell.topology or (scenario.topology.mode if scenario.topology else "colocated")


def cell_topology(scenario: Scenario, cell: MatrixCell) -> TopologySpec | None:
    """The cell's ``[topology]``: the scenario's, in the cell's mode, each side's overrides after the scenario's
    (and the cell's connector and connector_extra in place of the scenario's);
    None where neither the scenario nor the cell has one (the launcher alone)."""
    if cell.base_url is not None or (scenario.topology is None and cell.topology is None):
        return None
    base = scenario.topology or TopologySpec()
    update: dict[str, object] = {"mode": cell_mode(scenario, cell), "prefill": cell.prefill.over(base.prefill)}
    update["decode"] = cell.decode.over(base.decode)
    if cell.connector is not None:
        update["connector"] = cell.connector
    if cell.connector_extra is not None:
        update["connector_extra"] = cell.connector_extra
    return base.model_copy(update=update)


def _check_cell_topology(scenario: Scenario, cell: MatrixCell, where: str) -> None:
    mode, plain = cell_mode(scenario, cell), Side()
    if mode == "colocated" and (cell.prefill != plain or cell.decode != plain):
        raise ScenarioError(f"{where}: a colocated cell is one engine: give its flags in 'args' and 'env'")
    if mode == "reload" and cell.prefill != plain:
        raise ScenarioError(f"{where}.prefill: mode 'reload' is one engine, set by 'decode' (it prefills for itself)")
    if mode == "colocated" and (cell.connector is not None or cell.connector_extra is not None):
        raise ScenarioError(f"{where}.connector: a colocated cell is one engine; no KV crosses to another")
    if cell.decoder_direct and mode != "pd":
        raise ScenarioError(f"{where}.decoder_direct: needs topology 'pd' (a decode server to ask directly)")
    if mode == "colocated":
        return
    if scenario.cold_boot is not None:
        raise ScenarioError(f"{where}.topology: a cold-boot study restarts one engine, not a {mode!r} topology")
    topology = cell_topology(scenario, cell)
    assert topology is not None
    if why := check_topology(topology, cell_launcher(scenario.launcher, cell), mode):
        raise ScenarioError(f"{where}: {why}")


def cell_launcher(base: LauncherSpec | None, cell: MatrixCell) -> LauncherSpec | None:
    """The cell's engine: the scenario's launcher (else the embedded engine) plus the cell's args and env, and the
    cell's ``kv_offload`` in place of the launcher's."""
    if cell.base_url is not None:
        return None
    spec = base or LauncherSpec()
    data = spec.model_dump()
    data["args"] = [*spec.args, *cell.args]
    data["env"] = {**spec.env, **cell.env}
    if cell.kv_offload is not None:
        data["kv_offload"] = cell.kv_offload.model_dump()
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
        if cell.base_url is None:
            index = scenario.matrix.cells.index(cell)
            _check_cell_topology(scenario, cell, f"{source}: field matrix.cells[{index}]")
    # every router the cells start is installed: said before the first cell runs, naming each cell that needs it
    require_routers(
        [
            ((cell_launcher(scenario.launcher, c) or LauncherSpec()).kind, cell_topology(scenario, c), c.name)
            for c in cells
        ]
    )
    return cells


def _run_cell(
    matrix: RunRequest,
    scenario: Scenario,
    cell: MatrixCell,
    *,
    boots: int | None,
    requests: int | None,
    progress: Progress = no_progress,
) -> CellResult:
    """One cell of ``matrix`` (the request every cell shares) into ``<out_dir>/cells/<cell>/``."""
    labels = {**matrix.labels, "cell": cell.name, **cell.labels}
    launcher = cell_launcher(scenario.launcher, cell)
    topology = cell_topology(scenario, cell)
    request = replace(matrix, out_dir=matrix.out_dir / "cells" / cell.name, labels=labels)
    t0 = time.monotonic()
    try:
        if cell.decoder_direct:
            assert topology is not None  # check_matrix: decoder_direct needs mode pd
            return _run_phased(request, scenario, cell, launcher, topology, progress)
        if scenario.cold_boot is not None:
            cb = cold_boot(
                request.scenario_path,
                out_dir=request.out_dir,
                boots=boots,
                requests=requests,
                labels=labels,
                launcher=launcher,
                progress=progress,
            )
            return CellResult(cell.name, labels, cb.run_dir, cb.status, time.monotonic() - t0, coldboot=cb.summary)
        res = run(replace(request, host=cell.base_url, launcher=launcher, topology=topology), progress=progress)
        assert res.status is not None  # a headless run always ends with a status
        return CellResult(cell.name, labels, res.run_dir, res.status, time.monotonic() - t0, compare_to=cell.compare_to)
    except (EngineError, EndpointError) as exc:  # this cell's engine; the other cells may still run
        wall = time.monotonic() - t0
        return CellResult(cell.name, labels, None, RunStatus.FAILED, wall, error=str(exc), compare_to=cell.compare_to)


def _run_phased(
    request: RunRequest,
    scenario: Scenario,
    cell: MatrixCell,
    launcher: LauncherSpec | None,
    topology: TopologySpec,
    progress: Progress,
) -> CellResult:
    """A ``decoder_direct`` cell (``request``: the cell's): its topology once, the decoder's phases around the
    sweep."""
    t0 = time.monotonic()

    def run_phase(
        *,
        host: str,
        servers: list[Server],
        out_dir: Path,
        phase: str,
        facts: EngineFacts | None,
        levels: list[int] | None = None,
    ) -> RunResult:
        phased = replace(
            request,
            host=host,
            servers=tuple(servers),
            engine_facts=facts,
            out_dir=out_dir,
            levels=request.levels if levels is None else tuple(levels),
            labels={**request.labels, "phase": phase},
        )
        return run(phased, progress=progress)

    phases = run_phases(scenario, request.source, launcher, topology, request.out_dir, run_phase, progress)
    sweep = next(p for p in phases if p.name == SWEEP)
    # the cell finished when every phase did; else the first phase's that did not
    status = next(
        (p.status or RunStatus.INTERRUPTED for p in phases if p.status != RunStatus.FINISHED), RunStatus.FINISHED
    )
    others = [p for p in phases if p.name != SWEEP]
    wall = time.monotonic() - t0
    labels = dict(request.labels)
    return CellResult(cell.name, labels, sweep.run_dir, status, wall, compare_to=cell.compare_to, phases=others)


def _newest_reported(folder: Path) -> Path | None:
    """The newest run folder directly in ``folder`` that has a report (run folders are named by their UTC start)."""
    if not folder.is_dir():
        return None
    runs = sorted(p for p in folder.iterdir() if (p / "report.json").is_file() and (p / MANIFEST).is_file())
    return runs[-1] if runs else None


def _status(run_dir: Path) -> RunStatus:
    """A run's status as its manifest says; one this version does not know reads as stopped early."""
    said = read_manifest(run_dir).status
    return RunStatus(said) if said in set(RunStatus) else RunStatus.INTERRUPTED


def reused_cell(cell: MatrixCell, out_dir: Path, labels: dict[str, str]) -> CellResult | None:
    """The cell as an earlier run left it in ``out_dir/cells/<cell>/`` (its newest reported run, and a decoder's
    phases), whatever that run's status; None where it has none. Nothing is run or rewritten."""
    cell_out = out_dir / "cells" / cell.name
    run_dir = _newest_reported(cell_out)
    if run_dir is None:
        return None
    status = _status(run_dir)
    phases = [
        Phase(name, d, _status(d))
        for name in (DIRECT if cell.decoder_direct else ())
        if (d := _newest_reported(cell_out / name)) is not None
    ]
    labels = {**labels, "cell": cell.name, **cell.labels}
    return CellResult(cell.name, labels, run_dir, status, 0.0, compare_to=cell.compare_to, phases=phases, reused=True)


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
    reuse: bool = False,
    progress: Progress = no_progress,
) -> MatrixResult:
    """Run every cell of ``scenario_path``'s ``[matrix]`` (or those named in ``only``) in order, then write the
    comparison into ``out_dir``. With ``reuse``, a cell that already has a reported run in ``out_dir`` (one
    ``--cells`` share of the matrix run beside others, into the same folder) is compared as it is, not run
    again. ``progress`` hears each cell's start and end and, in between, the cell's own run or cold-boot
    events (``loadgen.studies.events``); it must not raise."""
    source = str(scenario_path)
    scenario = load_scenario(scenario_path)
    cells = check_matrix(scenario, source, only)
    if reuse and scenario.cold_boot is not None:
        raise UsageError(f"{source}: --reuse compares sweep cells; a cold-boot matrix runs its boots again")
    matrix = RunRequest(
        scenario_path,
        out_dir=out_dir,
        levels=None if levels is None else tuple(levels),
        canaries_per_level=canaries_per_level,
        labels=labels or {},
        processes=processes,
    )
    results = []
    for index, cell in enumerate(cells, start=1):
        if reuse and (kept := reused_cell(cell, out_dir, labels or {})) is not None:
            results.append(kept)
            continue
        progress(CellStarted(index, len(cells), cell.name))
        done = _run_cell(matrix, scenario, cell, boots=boots, requests=requests, progress=progress)
        progress(CellEnded(index, len(cells), cell.name, done.status, done.wall_s))
        results.append(done)
    result = MatrixResult(out_dir, "cold_boot" if scenario.cold_boot else "sweep", results)
    write_matrix(result, scenario)
    return result


def write_matrix(result: MatrixResult, scenario: Scenario) -> list[Path]:
    out = result.out_dir
    out.mkdir(parents=True, exist_ok=True)
    ran = [c for c in result.cells if c.run_dir is not None]
    columns = [col for c in ran for col in c.columns(ran[0].name)] if ran else []
    done = [(name, load_report(run_dir)) for name, run_dir, _ in columns]
    bases = {name: base for name, _, base in columns}
    boots = {c.name: c.coldboot for c in ran}  # a cold-boot cell's answer, for comparison.html too
    cmp = compare_reports(done, bases, [boots.get(name) for name, _, _ in columns])
    paths = write_comparison(cmp, done, out) if len(done) >= 2 else []
    cells = [
        {
            "name": c.name,
            "labels": c.labels,
            "run_dir": None if c.run_dir is None else str(c.run_dir),
            "status": c.status,
            "wall_s": round(c.wall_s, 3),
            "reused": c.reused,
            "error": c.error,
            "coldboot": c.coldboot,
            "compared_with": c.compare_to or (ran[0].name if ran else None),
            "phases": [{"name": p.name, "run_dir": str(p.run_dir), "status": p.status} for p in c.phases],
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
        wall = "reused" if c.reused else f"{c.wall_s:.1f}"
        lines.append(f"| {c.name} | {labels} | {c.status} | {wall} | {where} |")
        lines += [f"| {c.name}/{p.name} | phase={p.name} | {p.status} | | `{p.run_dir}` |" for p in c.phases]
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
