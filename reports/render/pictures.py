"""The report page's pictures of where and why the canary forks, built from a finished canary entry:
the fork-gap histogram (near-tie or structural), the logprob-drift heatmap (position × level) and the
first-divergence position histogram per level. Pure: a report entry in, SVG strings out (``""`` when
the entry has nothing to draw); the drawing is ``reports.render.svg_bars`` and ``reports.render.svg_heatmap``.
"""

from __future__ import annotations

from typing import Any

from reports.model.report import Canary
from reports.render.svg_bars import histogram, strips
from reports.render.svg_heatmap import heatmap


def _bin_label(lo: Any, hi: Any) -> str:
    return f"≥{lo:g}" if hi is None else f"{lo:g}–{hi:g}"


def fork_gap_chart(entry: Canary) -> str:
    """The sweep's divergent completions by their reference's top-1 − top-2 gap, in estimated rounding
    steps; bins at or below the near-tie line in the second colour."""
    g = entry.get("fork_gaps")
    if not g or not any(isinstance(b.get("count"), int) and b["count"] > 0 for b in g["histogram"]):
        return ""
    line = g.get("near_tie_steps")
    bins = [
        (
            _bin_label(b["lo"], b["hi"]),
            b["count"],
            isinstance(line, int | float) and b["hi"] is not None and b["hi"] <= line,
        )
        for b in g["histogram"]
    ]
    return histogram(
        "Fork gaps: reference top-1 − top-2, in logit rounding steps",
        bins,
        "gap / estimated rounding step",
        "divergent canaries",
        legend=f"near-tie (≤ {line:g} steps)" if isinstance(line, int | float) else "",
    )


def drift_heatmap_chart(entry: Canary) -> str:
    hm = entry.get("drift_heatmap")
    if not hm or not hm.get("levels"):
        return ""
    bw, ncol = hm["bin_width"], max((len(r) for r in hm["max"]), default=0)
    unit = entry["reference"].get("unit", "token")
    step = max(1, ncol // 8)
    ticks = [(c, str(c * bw)) for c in range(0, ncol, step)]
    rows = [(f"c={lv}", vals) for lv, vals in zip(hm["levels"], hm["max"], strict=False)]
    where = f"{unit} position" + (f" (bins of {bw})" if bw > 1 else "")
    return heatmap(
        "Logprob drift by position × concurrency (max before divergence)",
        rows,
        ticks,
        where,
        "concurrency",
        "|Δ logprob|",
    )


def first_divergence_chart(entry: Canary) -> str:
    rows = []
    for lv in entry["levels"]:
        fd = lv.get("first_divergence")
        rows.append((f"c={lv['concurrency']}", [(p, n) for p, n in fd["histogram"]] if fd else []))
    if not any(pts for _, pts in rows):
        return ""
    unit = entry["reference"].get("unit", "token")
    return strips("First divergence position, per level", rows, f"{unit} position (0-based)")
