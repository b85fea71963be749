"""Put 2..N runs side by side: figures aligned by canary and concurrency level, deltas against the
first run, overlaid plots; ``comparison.json``, ``.md`` and ``.html``.

``compare_reports`` is pure (``reports.model.report.Report`` in, ``reports.model.report.Comparison`` out);
``write_comparison`` is the one writer; the pages are rendered by ``reports.compare.md`` and
``reports.compare.html``. Each run gets a short ``label`` (A, B, ...) that tables and charts name it
by. Works on single- and multi-canary reports alike: canaries are matched by id; a canary or a level
missing from a run shows as ``null``, never 0.
"""

from __future__ import annotations

import json
from pathlib import Path

from loadgen.core.errors import RunFolderError
from reports.analysis import cost
from reports.analysis.coldboot import ColdBootSummary, compared
from reports.compare.html import render_html
from reports.compare.kv import compare_kv
from reports.compare.md import render_markdown
from reports.compare.references import reference_checks
from reports.model.comparison import ComparedCanary, ComparedCost, ComparedLevel, Comparison, CostRow, FigureRow
from reports.model.report import Canary, Figures, Level, Report
from reports.render.compare_cells import FIGURES, run_label
from reports.render.writer import report_json, write_text

__all__ = ["FIGURES", "compare_reports", "figures", "render_html", "render_markdown", "run_names", "write_comparison"]


def figures(block: Figures | None) -> FigureRow | None:
    if block is None:
        return None
    drift = block.get("logprob_drift")
    return {
        "canaries": block.get("canaries"),
        "errors": block.get("errors"),
        "unique_completions": block.get("unique_completions"),
        "diverged": block.get("diverged"),
        "divergence_rate": block.get("divergence_rate"),
        "earliest_divergence": block.get("earliest_divergence"),
        "modal_share": block.get("modal_share"),
        "drift_max": None if drift is None else drift["max"],
        "bitwise_equal_share": None if drift is None else drift["bitwise_equal_share"],
    }


def _deltas(rows: list[FigureRow | None]) -> list[FigureRow | None]:
    base = rows[0]
    out: list[FigureRow | None] = []
    for row in rows:
        if row is None or base is None:
            out.append(None)
            continue
        out.append({k: _delta(row[k], base[k]) for k in FIGURES})
    return out


def _delta(value: float | None, base: float | None) -> float | None:
    return None if value is None or base is None else value - base


def run_names(reports: list[tuple[str, Report]]) -> list[str]:
    names: list[str] = []
    for name, _ in reports:
        candidate, i = name, 2
        while candidate in names:
            candidate, i = f"{name} ({i})", i + 1
        names.append(candidate)
    return names


def _level(entry: Canary | None, level: int) -> Level | None:
    """``entry``'s figures at ``level``; None where the run lacks the canary or the level."""
    return None if entry is None else next((x for x in entry["levels"] if x["concurrency"] == level), None)


def compare_reports(
    reports: list[tuple[str, Report]],
    bases: dict[str, str] | None = None,
    coldboot: list[ColdBootSummary | None] | None = None,
) -> Comparison:
    """``reports``: (name, report) pairs, the first being the base that deltas are taken against. ``bases``
    (run name -> the run whose reference completions it is compared with; names must be distinct): adds
    ``references``, each run's reference against its base's (``reports.compare.references``). ``coldboot``
    (each run's cold-boot summary, None for a sweep run): adds ``coldboot`` for the runs that have one."""
    names = run_names(reports)
    ids = sorted({e["id"] for _, r in reports for e in r["canaries"]})
    canaries: list[ComparedCanary] = []
    for cid in ids:
        entries = [next((e for e in r["canaries"] if e["id"] == cid), None) for _, r in reports]
        overall = [figures(None if e is None else e["overall"]) for e in entries]
        levels = sorted({lv["concurrency"] for e in entries if e for lv in e["levels"]})
        per_level: list[ComparedLevel] = []
        for level in levels:
            rows = [figures(_level(e, level)) for e in entries]
            per_level.append({"concurrency": level, "runs": rows, "deltas": _deltas(rows)})
        pairs = list(zip([r for _, r in reports], entries, strict=True))
        costs: list[ComparedCost] = [
            {"concurrency": level if level is not None else "overall", "runs": [_cost(r, e, level) for r, e in pairs]}
            for level in [None, *levels]
        ]
        canaries.append(
            {
                "id": cid,
                "verdicts": [None if e is None else e.get("verdict") for e in entries],
                "reference_kinds": [None if e is None else e["reference"]["kind"] for e in entries],
                "overall": {"runs": overall, "deltas": _deltas(overall)},
                "levels": per_level,
                "cost": costs,
            }
        )
    flags = [cost.batch_invariant(r) for _, r in reports]
    cmp: Comparison = {
        "schema": 1,
        "frontier": cost.differ(flags),
        "runs": [
            {
                "name": n,
                "label": run_label(i),
                "id": r["run"].get("id"),
                "model": r["run"].get("model"),
                "endpoint": r["run"].get("endpoint"),
                "labels": r["run"].get("labels", {}),
                "server": r["run"].get("server_config", {}).get("summary") or None,
                "batch_invariant": flag,
            }
            for i, (n, (_, r), flag) in enumerate(zip(names, reports, flags, strict=True))
        ],
        "canaries": canaries,
    }
    if bases is not None:
        cmp["references"] = reference_checks(reports, bases)
    if (kv := compare_kv(names, [r for _, r in reports])) is not None:
        cmp["kv"] = kv
    boots = [compared(n, s) for n, s in zip(names, coldboot or [], strict=False) if s is not None]
    if boots:
        cmp["coldboot"] = boots
    return cmp


def coldboot_of(path: Path) -> ColdBootSummary | None:
    """The cold-boot summary beside a run (``RUN_DIR/coldboot.json``, or beside its ``report.json``); None
    for a sweep run, or one whose summary cannot be read (the comparison then shows its report only)."""
    folder = path.parent if path.name == "report.json" else path
    try:
        summary = json.loads((folder / "coldboot.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict):
        return None
    try:
        compared(folder.name, summary)  # type: ignore[arg-type]  # every key the comparison reads is there
    except (KeyError, TypeError, AttributeError):
        return None
    return summary  # type: ignore[return-value]


def _cost(report: Report, entry: Canary | None, level: int | None) -> CostRow | None:
    """One run's cost row (``reports.analysis.cost.cost_row``) for a canary at a level (None: overall)."""
    if entry is None:
        return None
    block: Figures | None = entry["overall"] if level is None else _level(entry, level)
    return cost.cost_row(report, block, level)


def write_comparison(cmp: Comparison, reports: list[tuple[str, Report]], out_dir: Path) -> list[Path]:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunFolderError(f"--out {out_dir}: cannot create ({exc.strerror or exc})") from exc
    paths = [out_dir / "comparison.json", out_dir / "comparison.md", out_dir / "comparison.html"]
    write_text(paths[0], report_json(cmp))
    write_text(paths[1], render_markdown(cmp))
    write_text(paths[2], render_html(cmp, reports))
    return paths
