"""The report's figures, built from finished report entries (one run, or several overlaid for compare).

Pure: report dicts in, SVG strings out. Concurrency levels are spaced evenly (they are usually
0, 1, 2, 4, ...), labelled with their values; runs missing a level leave a gap. Each entry (a run, in a
comparison) has one colour in every chart, whatever its series (its p99 and drift mean dashed in that colour).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

from reports.model.comparison import ComparedCanary, Comparison
from reports.model.report import Canary, Level, LogprobDrift
from reports.render.compare_cells import run_label
from reports.render.svg import Series, chart, nice_ceiling, tick

Named = list[tuple[str, Canary]]  # (series name, canary entry)
# The canary latency quantiles drawn: the same two the cost tables beside the charts print
# (``reports.analysis.cost.cost_row``, ``reports.render.compare_cells.COST_COLUMNS``), by the same names.
Quantile = Literal["p50", "p99"]
LATENCIES: tuple[Quantile, ...] = ("p50", "p99")


def _axis(entries: Named) -> tuple[dict[int, float], list[tuple[float, str]]]:
    levels = sorted({lv["concurrency"] for _, e in entries for lv in e["levels"]})
    pos = {lv: float(i) for i, lv in enumerate(levels)}
    return pos, [(pos[lv], str(lv)) for lv in levels]


def _series(
    entries: Named,
    pick: Callable[[Level], float | None],
    band: Callable[[Level], list[float] | None] | None = None,
    dashed: bool = False,
) -> list[Series]:
    pos, _ = _axis(entries)
    out = []
    for i, (name, e) in enumerate(entries):
        pts = [(pos[lv["concurrency"]], pick(lv)) for lv in e["levels"]]
        bars = [] if band is None else [(pos[lv["concurrency"]], b[0], b[1]) for lv in e["levels"] if (b := band(lv))]
        out.append(Series(name, pts, bars, dashed=dashed, color=i))  # the entry's (run's) colour in every chart
    return out


def unique_vs_level(entries: Named) -> str:
    _, ticks = _axis(entries)
    series = _series(entries, lambda lv: lv["unique_completions"] if lv["completions"] else None)
    return chart(
        "Unique completions vs concurrency", series, ticks, "unique completions", x_label="concurrency", integer_y=True
    )


def rate_vs_level(entries: Named) -> str:
    _, ticks = _axis(entries)
    series = _series(entries, lambda lv: lv["divergence_rate"], lambda lv: lv["divergence_rate_ci95"])
    return chart("Divergence rate vs concurrency (95% Wilson)", series, ticks, "share diverged", 1.0, "concurrency")


def earliest_vs_level(entries: Named, unit: str = "token") -> str:
    _, ticks = _axis(entries)
    series = _series(entries, lambda lv: lv.get("earliest_divergence"))
    return chart(
        "Earliest divergence vs concurrency", series, ticks, f"{unit} position", x_label="concurrency", integer_y=True
    )


def drift_vs_level(entries: Named) -> str:
    """Max and mean drift per level; each max point labelled with how much it measured (``n=`` token positions),
    and every point's hover text says it in full: a max over a handful of positions is weak evidence."""
    _, ticks = _axis(entries)
    series = _series(entries, lambda lv: None if lv["logprob_drift"] is None else lv["logprob_drift"]["max"])
    series += _series(
        entries, lambda lv: None if lv["logprob_drift"] is None else lv["logprob_drift"]["mean"], dashed=True
    )
    for s, (_, e) in zip(series, [*entries, *entries], strict=True):
        s.notes = [_measured(lv["logprob_drift"]) for lv in e["levels"]]
    for s in series[len(entries) :]:
        s.name += " (mean)"
    for s, (_, e) in zip(series, entries, strict=False):
        s.name += " (max)"
        s.tags = [_measured_tag(lv["logprob_drift"]) for lv in e["levels"]]
    return chart("Logprob drift before divergence vs concurrency", series, ticks, "|Δ logprob|", x_label="concurrency")


def _measured(drift: LogprobDrift | None) -> str:
    """What one drift point measured, in words: ``120 positions over 12 completions``."""
    if drift is None:
        return ""
    n = drift["compared"]
    over = f"{n} completion{'s' if n != 1 else ''}"
    positions = drift.get("positions")
    return over if positions is None else f"{positions} position{'s' if positions != 1 else ''} over {over}"


def _measured_tag(drift: LogprobDrift | None) -> str:
    """The label beside a max point: ``n=120`` positions (``12 compl.`` from a report that did not count them)."""
    if drift is None:
        return ""
    positions = drift.get("positions")
    return f"{drift['compared']} compl." if positions is None else f"n={positions}"


def latency_vs_level(entries: Named) -> str:
    _, ticks = _axis(entries)
    series = []
    for q in LATENCIES:
        part = _series(entries, _latency(q))
        for s in part:
            s.name += f" {q}"
            s.dashed = q != LATENCIES[0]
        series += part
    return chart("Canary latency by concurrency (context)", series, ticks, "seconds", x_label="concurrency")


def _latency(q: Quantile) -> Callable[[Level], float | None]:
    return lambda lv: None if lv["latency_s"] is None else lv["latency_s"][q]


def divergence_cdf(entry: Canary, unit: str = "token") -> str:
    """Per level: share of the level's completions that have diverged by each position."""
    series = []
    max_pos = 1
    for lv in entry["levels"]:
        fd = lv["first_divergence"]
        if fd is None or not lv["completions"]:
            continue
        total, acc = lv["completions"], 0
        pts: list[tuple[float, float | None]] = [(0.0, 0.0)]
        for p, count in fd["histogram"]:
            pts.append((float(p), acc / total))
            acc += count
            pts.append((float(p), acc / total))
        max_pos = max(max_pos, fd["max"])
        series.append(Series(f"c={lv['concurrency']}", pts))
    for s in series:
        s.points.append((float(max_pos), s.points[-1][1]))
    ticks = [(0.0, "0"), (float(max_pos // 2), tick(max_pos // 2)), (float(max_pos), tick(max_pos))]
    return chart("First divergence: cumulative share by position", series, ticks, "share diverged", 1.0, unit)


def frontier(cmp: Comparison, canary: ComparedCanary) -> str:
    """Cost versus divergence: per run, each level's background throughput (x) against the canary's
    divergence rate (y), from a comparison's ``cost`` rows (``reports.compare.runs``); levels without
    background throughput are left out. Runs are named by their letter, as everywhere on the page,
    and each point by its level (``c=8``)."""
    series = []
    flags: dict[bool | None, str] = {True: "batch-invariant on", False: "batch-invariant off"}
    for i, run in enumerate(cmp["runs"]):
        flag = flags.get(run.get("batch_invariant"), "unknown")
        pts: list[tuple[float, float | None]] = []
        tags: list[str] = []
        for lv in canary.get("cost", []):
            row = lv["runs"][i]
            if lv["concurrency"] == "overall" or row is None or row["background_tokens_per_s"] is None:
                continue
            pts.append((row["background_tokens_per_s"], row["divergence_rate"]))
            tags.append(f"c={lv['concurrency']}")
        series.append(Series(f"{run.get('label') or run_label(i)} ({flag})", pts, tags=tags, color=i))
    xs = [x for s in series for x, _ in s.points if isinstance(x, int | float) and math.isfinite(x)]
    top = nice_ceiling(max(xs, default=1.0))
    ticks = [(0.0, "0"), (top / 2, tick(top / 2)), (top, tick(top))]
    return chart("Cost vs divergence (frontier)", series, ticks, "share diverged", 1.0, "background tokens/s")
