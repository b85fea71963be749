"""What both comparison renderers (``reports.compare.md``, ``reports.compare.html``) print in a cell: run letters, a
figure with its delta against the first run, the metrics shown and the cost columns.

Why a module of its own: run folder names are long (``20261130T113217Z-vllm-d3-2x2``), so tables name
runs by a letter (A, B, ...) with a legend above, and the Markdown and HTML pages must agree on the
letters, the metrics and how a delta reads. Pure: comparison dicts in (``reports.compare.runs``), strings
out; no escaping here (each renderer escapes for its own format).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, get_args

from reports.model.comparison import ComparedCanary, ComparedFigures, Comparison, FigureName, FigureRow
from reports.model.finite import finite
from reports.render.md import fmt

# Every figure a comparison row holds (``reports.compare.runs.figures``), in the order the HTML shows them:
# the model's own list, so the two cannot drift apart.
FIGURES: tuple[FigureName, ...] = get_args(FigureName)
# The figures a per-metric table shows in comparison.md, with their titles (comparison.html shows all).
MD_METRICS: tuple[tuple[FigureName, str], ...] = (
    ("unique_completions", "Unique completions"),
    ("divergence_rate", "Divergence rate (share of completions)"),
    ("earliest_divergence", "Earliest divergence (position)"),
    ("errors", "Errors"),
)
TITLES: dict[FigureName, str] = {
    "canaries": "Canaries",
    "errors": "Errors",
    "unique_completions": "Unique completions",
    "diverged": "Diverged",
    "divergence_rate": "Divergence rate",
    "earliest_divergence": "Earliest divergence",
    "modal_share": "Modal share",
    "drift_max": "Logprob drift max",
    "bitwise_equal_share": "Bitwise-equal share",
}
CostKey = Literal[
    "background_tokens_per_s", "canary_latency_p50", "canary_latency_p99", "unique_completions", "divergence_rate"
]
# (key in a cost row, Markdown header, HTML header): short Markdown headers keep a row under 100 columns.
COST_COLUMNS: tuple[tuple[CostKey, str, str], ...] = (
    ("background_tokens_per_s", "bg tokens/s", "background tokens/s"),
    ("canary_latency_p50", "p50 s", "canary p50 s"),
    ("canary_latency_p99", "p99 s", "canary p99 s"),
    ("unique_completions", "unique", "unique"),
    ("divergence_rate", "div. rate", "divergence rate"),
)
COST_PLACES: dict[CostKey, int] = {"unique_completions": 0, "divergence_rate": 3}  # a count; a share
COST_NOTE = (
    "Background tokens/s: completion tokens of the level's successful background requests over the level's "
    "wall time (first background send to last background end); overall: all levels' tokens over the sum of "
    "their wall times. Canary latency: the canary's own p50 and p99 at that level."
)


def decimals(values: list[float]) -> int:
    """Decimals for a whole column, by its largest magnitude: 0 from 100 up, 1 from 10, 2 from 1, else 3."""
    top = max((abs(v) for v in values), default=0.0)
    return 0 if top >= 100 else 1 if top >= 10 else 2 if top >= 1 else 3


def column_format(values: list[object], places: int | None = None) -> Callable[[object], str]:
    """One number format for a column of ``values``: thousands separators and the same decimals on every
    row (``875`` above ``1,100``, never ``875`` above ``1.1e+03``), ``places`` of them or as many as the
    column's magnitude calls for (``decimals``). A missing or non-finite value is a dash."""
    if places is None:
        places = decimals([float(v) for v in values if finite(v) and math.isfinite(float(v))])

    def show(v: object) -> str:
        if not finite(v) or isinstance(v, bool):
            return "—"
        return f"{float(v):,.{places}f}"

    return show


def cost_formats(canary: ComparedCanary) -> dict[CostKey, Callable[[object], str]]:
    """Each cost column's one format over the canary's cost table (every level and run)."""
    rows = [row for lv in canary.get("cost", []) for row in lv["runs"] if row is not None]
    return {k: column_format([r[k] for r in rows], COST_PLACES.get(k)) for k, _, _ in COST_COLUMNS}


def run_label(index: int) -> str:
    """A, B, ..., Z, then R27, R28, ...: short, and never a run's own (long, often alike) folder name."""
    return chr(ord("A") + index) if index < 26 else f"R{index + 1}"


def labels(cmp: Comparison) -> list[str]:
    """Each run's letter: the one ``compare_reports`` stored, else its position's (older comparisons)."""
    return [r.get("label") or run_label(i) for i, r in enumerate(cmp["runs"])]


def signed(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:+.3g}" if isinstance(v, float) else f"{v:+d}"


def value(row: FigureRow | None, key: FigureName) -> str:
    return fmt(None if row is None else row[key])


def delta(d: FigureRow | None, key: FigureName, first: bool) -> str:
    """The delta against the first run, "" for the first run itself."""
    return "" if first else signed(None if d is None else d[key])


def with_delta(row: FigureRow | None, d: FigureRow | None, key: FigureName, first: bool) -> str:
    """``0.667 (+0.667)``: a figure and, after the first run, its delta in parentheses (left out where either
    figure is missing: a dash says that already)."""
    change = "" if d is None or d[key] is None else delta(d, key, first)
    return value(row, key) + (f" ({change})" if change else "")


class Block(ComparedFigures):
    """A row of a comparison table: ``overall`` or one level, each run's figures and deltas."""

    concurrency: int | Literal["overall"]


def level_blocks(canary: ComparedCanary) -> list[Block]:
    """A comparison canary's rows in order: ``overall`` first, then each level."""
    levels: list[Block] = [{**lv} for lv in canary["levels"]]
    return [{"concurrency": "overall", **canary["overall"]}, *levels]


def batch_invariance(flag: bool | None) -> str:
    return "—" if flag is None else ("on" if flag else "off")


REFERENCE_NOTE = (
    "Each run's reference completion (its modal baseline completion, before any load) against the reference "
    "of the run named beside it, compared token string by token string: where they first differ, and the two "
    "tokens there. A run can diverge nowhere inside itself and still break the reference."
)


def run_letters(cmp: Comparison) -> dict[str, str]:
    """Each run's name to its letter."""
    return dict(zip([r["name"] for r in cmp["runs"]], labels(cmp), strict=True))
