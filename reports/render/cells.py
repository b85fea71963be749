"""How one figure is written in a table cell: the same string in report.md, report.html and the web UI's table.

Why a module of its own: the web UI's live table (``loadgen.load.live``, in the Locust processes) shows a
finished level's cells exactly as the report writes them, and the Locust side must not import a renderer
(``tests/loadgen/load/test_locust_imports.py``). Pure formatting of numbers and the report's own figures
(``reports.model.report``); no server string is written here, so nothing needs escaping.
"""

from __future__ import annotations

import math
from typing import Any

from reports.model.coresidency import CoResidency
from reports.model.finite import finite
from reports.model.report import Figures, Level


def fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if math.isfinite(v) else "—"
    return str(v)


def _percent(v: object) -> float | None:
    """``v`` as a finite percentage, or None (not a real number, a bool, too large for a float)."""
    if not finite(v):
        return None
    p = 100 * float(v)
    return p if math.isfinite(p) else None


def pct(v: float | None) -> str:
    p = _percent(v)
    return "—" if p is None else f"{p:.1f}%"


def ci(v: list[float] | None) -> str:
    bounds = [_percent(x) for x in v] if v and len(v) == 2 else [None]
    if None in bounds:
        return "—"
    return f"{bounds[0]:.1f}–{bounds[1]:.1f}%"


def others(co: CoResidency | None) -> str:
    """Measured co-residency of a level as ``min/median/max`` other requests; ``—`` when unmeasured."""
    if not co or co.get("min") is None:
        return "—"
    return f"{fmt(co['min'])}/{fmt(co['median'])}/{fmt(co['max'])}"


def held(co: CoResidency | None) -> str:
    """``held throughout``: the canaries of a level whose measured co-residency never fell below what the level
    promises, over those measured, e.g. ``10/12``; ``—`` when none was measured. Not progress's ``held at send``
    (background slots holding a started request when a canary went out)."""
    if not co:
        return "—"
    measured = co["held"] + co["not_held"]
    return "—" if measured == 0 else f"{co['held']}/{measured}"


def at_level(lv: Level) -> str:
    """``at level``: the canaries whose median measured others lay in the level's band, over those measured, e.g.
    ``10/12``, and ``not measured`` where the level's load was not there (``reports.analysis.level_load``)."""
    co = lv.get("co_residency")
    judged = co["at_level"] + co["not_at_level"] if co and "at_level" in co else 0
    cell = f"{co['at_level']}/{judged}" if co and judged else "—"
    return f"{cell} not measured" if lv.get("not_measured") else cell


def rate_cell(rate: float | None, ci95: list[float] | None) -> str:
    """``rate (95% CI)``: ``41.7% (19.3–68.0%)``; the web UI's live table writes its own rate this way too."""
    return f"{pct(rate)} ({ci(ci95)})"


def level_cells(lv: Level) -> dict[str, str]:
    """A level's cells that only the finished report has, as its per-level table writes them (``levels_table``;
    the web UI's table shows these same strings once the run's report is written, ``loadgen.load.live``)."""
    dr = lv["logprob_drift"]
    co = lv.get("co_residency")
    return {
        "rate": rate_cell(lv["divergence_rate"], lv["divergence_rate_ci95"]),
        "drift_max": fmt(None if dr is None else dr["max"]),
        "bitwise": pct(None if dr is None else dr["bitwise_equal_share"]),
        "others": others_cell(lv) or others(co),
        "held_throughout": held(co),
        "at_level": at_level(lv),
    }


def _triple(co: CoResidency | None) -> str:
    if not co or co.get("min") is None:
        return "—"
    return f"{fmt(co['min'])}/{fmt(co['median'])}/{fmt(co['max'])}"


def others_cell(figures: Figures) -> str | None:
    """A level's ``others`` cell for a prefill/decode run, both sides: ``p 3/4/5 · d 0/1/1``; None for one engine."""
    sides = figures.get("co_residency_sides")
    if not sides:
        return None
    return f"p {_triple(sides['prefill'])} · d {_triple(sides['decode'])}"
