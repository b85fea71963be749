"""The web UI's live charts: unique completions, divergence rate and earliest divergence versus
concurrency, one line per canary, drawn from the rows of the live table (``live.LiveTable.rows``).

Why: the "Batch invariance" tab's table says what happened per level; a chart beside it shows at a
glance where determinism breaks as the load grows. Drawn from the very rows the table shows, so the
two always agree. Pure: rows in, an HTML fragment out (inline SVG from ``reports.render.svg``, which escapes
every label; the attributes written here are escaped too). No Locust, no I/O; baseline rows are not
plotted (they have no concurrency).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reports.render.htmltext import escape
from reports.render.svg import Series, chart

# Scoped to the fragment: Locust's page has its own styles, and a chart without these fills its lines black.
# The first rules put the table and the charts side by side where the page is wide enough (the box holding
# the fragment follows the table's container, ``webui_chart.js``), one under the other where it is not.
_PANEL = ":has(> #loadgen-live-chart)"
CSS = (
    f"{_PANEL}{{display:flex;flex-wrap:wrap;align-items:flex-start;column-gap:16px}}"
    f"{_PANEL} > *{{flex:1 1 100%;min-width:0}}"
    f"{_PANEL} > .MuiTableContainer-root{{flex:0 1 auto;width:auto}}"
    "#loadgen-live-chart{flex:1 1 480px}"
    ".lg-live{display:flex;flex-wrap:wrap;gap:12px;margin:0 0 12px}"
    ".lg-live .chart{border:1px solid #ddd;background:#fff;max-width:100%;height:auto}"
    ".lg-live .chart .title{font-weight:600;font-size:13px}.lg-live .chart .tick{font-size:11px;fill:#555}"
    ".lg-live .chart .legend{font-size:11px}.lg-live .chart .axis{stroke:#999}.lg-live .chart .grid{stroke:#eee}"
    ".lg-live .chart .line{fill:none;stroke-width:2}.lg-live .note{color:#888;font:13px sans-serif}"
)


@dataclass(frozen=True)
class Point:
    """One canary at one sweep level, as the charts need it (None: nothing to plot yet)."""

    unique: int | None
    rate: float | None
    earliest: int | None


def points(rows: Sequence[dict[str, Any]]) -> dict[str, dict[int, Point]]:
    """Per canary and sweep level, the three plotted figures, from live-table rows."""
    out: dict[str, dict[int, Point]] = {}
    for row in rows:
        level = str(row.get("level"))
        if not level.isdigit():
            continue  # the baseline: sent alone, no concurrency to plot it at
        completions = int(row["canaries"]) - int(row["errors"])
        diverged, earliest = row.get("diverged"), row.get("earliest")
        out.setdefault(str(row["canary"]), {})[int(level)] = Point(
            unique=int(row["unique"]) if completions > 0 else None,
            rate=diverged / completions if isinstance(diverged, int) and completions > 0 else None,
            earliest=earliest if isinstance(earliest, int) else None,
        )
    return out


def render(rows: Sequence[dict[str, Any]]) -> str:
    """The charts as one HTML fragment; a note instead while no sweep level has a canary yet."""
    by_canary = points(rows)
    levels = sorted({lv for per in by_canary.values() for lv in per})
    canaries = sorted(by_canary)
    attrs = f'class="lg-live" data-levels="{" ".join(map(str, levels))}" data-canaries="{escape(" ".join(canaries))}"'
    if not levels:
        return (
            f'<div {attrs}><style>{CSS}</style><p class="note">The charts fill as sweep levels get canaries.</p></div>'
        )
    pos = {lv: float(i) for i, lv in enumerate(levels)}  # evenly spaced, as the report's charts
    ticks = [(pos[lv], str(lv)) for lv in levels]

    def series(pick: Any) -> list[Series]:
        return [Series(c, [(pos[lv], pick(p)) for lv, p in sorted(by_canary[c].items())]) for c in canaries]

    charts = [
        chart(
            "Unique completions vs concurrency",
            series(lambda p: p.unique),
            ticks,
            "unique",
            x_label="concurrency",
            integer_y=True,  # counts: whole-number ticks
        ),
        chart("Divergence rate vs concurrency", series(lambda p: p.rate), ticks, "share diverged", 1.0, "concurrency"),
        chart(
            "Earliest divergence vs concurrency",
            series(lambda p: p.earliest),
            ticks,
            "position",
            None,
            "concurrency",
            integer_y=True,
        ),
    ]
    return f"<div {attrs}><style>{CSS}</style>{''.join(charts)}</div>"
