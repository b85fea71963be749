"""Property: every pure figure and chart function takes any float (null, NaN, ±infinity, ±1.7e308
included) without raising, and what it gives back is finite: a chart's coordinates, a report's numbers,
the HTML's embedded JSON. Non-finite values are skipped and counted."""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from typing import Any, cast

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from collectors.read.runfolder import MAX_ABS_LOGPROB, top_gap_counted
from loadgen.core.stats import median, quantiles
from reports.model.finite import scrub
from reports.model.report import Canary
from reports.render import plots
from reports.render.html import embedded_json, render_html
from reports.render.md import ci, pct, render_markdown
from reports.render.svg import Series, chart
from tests.reports.runkit import partial_report

HOSTILE = st.sampled_from([math.nan, math.inf, -math.inf, 1.7e308, -1.7e308, 1e-308, 0.0, -0.0])
FLOATS = st.floats() | HOSTILE
MAYBE = st.none() | FLOATS
NUMBER = re.compile(r'\b(?:x|y|x1|y1|x2|y2|cx|cy)="([^"]*)"')


def _finite_svg(svg: str) -> None:
    ET.fromstring(svg)  # well-formed
    for value in NUMBER.findall(svg):
        assert math.isfinite(float(value)), value
    for pair in re.findall(r'points="([^"]*)"', svg):
        assert all(math.isfinite(float(v)) for p in pair.split() for v in p.split(","))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.tuples(FLOATS, MAYBE), max_size=8), min_size=1, max_size=3),
    st.lists(st.tuples(FLOATS, FLOATS, FLOATS), max_size=4),
    st.none() | FLOATS,
)
def test_chart_takes_any_float(points: list[list[tuple[float, float | None]]], band: Any, y_max: Any) -> None:
    series = [Series(f"s{i}", p, band if i == 0 else []) for i, p in enumerate(points)]
    svg = chart("t", series, [(0.0, "0"), (1.0, "1")], "y", y_max)
    _finite_svg(svg)
    bad = sum(not math.isfinite(x) or (y is not None and not math.isfinite(y)) for p in points for x, y in p)
    bad += sum(not all(math.isfinite(v) for v in b) for b in band)
    assert (f"{bad} value" in svg) == (bad > 0)


def _level(c: int, v: Any) -> dict[str, Any]:
    return {
        "concurrency": c,
        "canaries": 4,
        "errors": 0,
        "completions": 4,
        "unique_completions": v,
        "diverged": 1,
        "divergence_rate": v,
        "divergence_rate_ci95": [v, v],
        "modal_share": v,
        "first_divergence": {"min": 1, "median": v, "max": 3, "histogram": [[1, 2], [3, 2]]},
        "logprob_drift": {"max": v, "mean": v, "bitwise_equal_share": v, "compared": 4},
        "latency_s": {"p50": v, "p90": v, "p99": v, "max": v, "n": 4},
        "co_residency": None,
    }


@settings(max_examples=100, deadline=None)
@given(st.lists(FLOATS, min_size=1, max_size=4))
@example([5e-324])  # a subnormal maximum: its power of ten underflows to 0.0 (nice_ceiling raised StopIteration)
def test_plots_and_renderers_take_any_figure(values: list[float]) -> None:
    entry = {
        "id": "c0",
        "verdict": "v",
        "reference": {
            "kind": "baseline",
            "identity": "token_ids",
            "unit": "token",
            "length": 3,
            "tokens": ["a"],
            "completions": 1,
            "unique_completions": 1,
            "self_consistent": True,
            "earliest_divergence": None,
            "text": "a",
            "identity_note": None,
        },
        "levels": [_level(i, v) for i, v in enumerate(values)],
        "forks": [
            {
                "position": 1,
                "reference_token": "a",
                "other_token": "b",
                "count": 1,
                "levels": {"0": 1},
                "first_seen_concurrency": 0,
                "top1_top2_gap": values[0],
            }
        ],
    }
    canary = cast("Canary", entry)  # a whole entry, but for its hostile figures
    named = [("run", canary)]
    for svg in (
        plots.unique_vs_level(named),
        plots.rate_vs_level(named),
        plots.drift_vs_level(named),
        plots.latency_vs_level(named),
        plots.divergence_cdf(canary),
    ):
        _finite_svg(svg)
    report = partial_report(run={"id": "r", "notices": []}, input={"skipped_lines": 0}, canaries=[entry])
    render_markdown(report)
    page = render_html(report)
    data = page.split('id="report-data">')[1].split("</script>")[0]
    json.loads(data)  # valid JSON: NaN and infinities became null


def _non_finite(value: Any) -> int:
    if isinstance(value, float):
        return int(not math.isfinite(value))
    if isinstance(value, dict):
        return sum(_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return sum(_non_finite(v) for v in value)
    return 0


@given(
    st.recursive(
        MAYBE | st.integers() | st.text(max_size=3),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
        max_leaves=20,
    )
)
def test_scrub_leaves_only_finite_numbers(value: Any) -> None:
    clean, count = scrub(value)
    text = json.dumps(clean, allow_nan=False)  # raises on any NaN or infinity left
    assert count == _non_finite(value)
    assert json.loads(embedded_json(value)) == json.loads(text)  # the HTML's data: valid JSON, nulls


@given(st.lists(FLOATS, max_size=50))
def test_statistics_never_raise(values: list[float]) -> None:
    arr = np.array(values, dtype=np.float64)
    for out in (median(arr), quantiles(arr)):
        scrub(out)


@given(
    st.lists(
        st.one_of(st.tuples(st.text(max_size=2), MAYBE | st.text(max_size=3)), st.none(), st.integers()), max_size=6
    )
)
def test_top_gap_skips_and_counts_unusable_alternatives(alts: list[Any]) -> None:
    top = [list(a) if isinstance(a, tuple) else a for a in alts]
    gap, bad = top_gap_counted(top)
    usable = [a[1] for a in alts if isinstance(a, tuple) and isinstance(a[1], float) and abs(a[1]) <= MAX_ABS_LOGPROB]
    assert bad == len(alts) - len(usable)
    assert (math.isnan(gap) and len(usable) < 2) or (len(usable) >= 2 and 0 <= gap <= 2 * MAX_ABS_LOGPROB)


JSON_NUMBERS = MAYBE | st.booleans() | st.integers() | st.integers(min_value=10**308, max_value=10**400)


@given(v=JSON_NUMBERS, band=st.lists(JSON_NUMBERS, max_size=3) | st.none())
def test_table_cells_take_any_json_number(v: Any, band: Any) -> None:
    """A report.json read back may hold any JSON number, an int beyond float range or a bool included:
    a rate prints as a percentage only when it is a finite real number, else "—", and never raises."""
    shown = pct(v)
    assert shown == "—" or (not isinstance(v, bool) and shown.endswith("%") and "nan" not in shown)
    assert ci(band) == "—" or (len(band) == 2 and not any(isinstance(x, bool) for x in band))
