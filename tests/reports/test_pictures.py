"""The drift heatmap (``reports.analysis.heatmap``: numbers; ``reports.render.svg_heatmap``: drawing) and the bar charts
(``reports.render.svg_bars``): right on constructed inputs, and never raising on arbitrary floats, with every
coordinate finite, every label escaped, and what was skipped counted."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from typing import Any, cast

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from reports.analysis.heatmap import drift_by_position
from reports.model.finite import finite
from reports.model.report import Canary
from reports.render import pictures
from reports.render.svg_bars import histogram, strips
from reports.render.svg_heatmap import heatmap

HOSTILE = st.sampled_from([math.nan, math.inf, -math.inf, 1.7e308, -1.7e308, 1e-308, 0.0, -0.0])
ANY = st.none() | st.floats() | HOSTILE | st.integers(min_value=-(10**400), max_value=10**400) | st.just("x")
NUMBER = re.compile(r'\b(?:x|y|x1|y1|x2|y2|cx|cy|width|height)="([^"]*)"')
EVIL = "<script>alert(1)</script>&"


def _finite_svg(svg: str) -> None:
    ET.fromstring(svg)  # well-formed
    for value in NUMBER.findall(svg):
        assert math.isfinite(float(value)), value
    assert "<script" not in svg


def test_drift_by_position_max_before_divergence_per_level() -> None:
    ref = np.array([-0.1, -0.2, -0.3, -0.4])
    lp = np.array(
        [
            [-0.1, -0.2, -0.3, -0.4],  # level 0: equal
            [-0.1, -0.25, -0.3, -0.9],  # level 4: drift 0.05 at 1; 0.5 at 3 is past its divergence (3)
            [-0.2, -0.2, np.nan, -0.4],  # level 4: drift 0.1 at 0; NaN not compared
        ]
    )
    hm = drift_by_position(lp, np.arange(3), ref, np.array([4, 3, 4]), np.array([0, 4, 4]), [0, 4, 8])
    assert hm is not None and (hm["positions"], hm["bin_width"], hm["levels"]) == (4, 1, [0, 4, 8])
    assert hm["max"][0] == [0.0, 0.0, 0.0, 0.0]
    assert hm["max"][1] == [pytest_approx(0.1), pytest_approx(0.05), 0.0, 0.0]
    assert hm["compared"][1] == [2, 2, 1, 1]
    assert hm["max"][2] == [None] * 4 and hm["compared"][2] == [0] * 4  # a level with no canary


def pytest_approx(v: float) -> Any:
    import pytest

    return pytest.approx(v)


def test_long_references_are_binned() -> None:
    n = 300
    ref = np.zeros(n)
    lp = np.zeros((1, n))
    lp[0, 299] = 0.5
    hm = drift_by_position(lp, np.arange(1), ref, np.array([n]), np.array([1]), [1], max_columns=64)
    assert hm is not None and hm["bin_width"] == 5 and len(hm["max"][0]) == 60
    assert hm["max"][0][-1] == 0.5 and hm["compared"][0][0] == 5


def test_heatmap_escapes_and_counts() -> None:
    svg = heatmap(EVIL, [(EVIL, [0.0, 0.01, None, math.nan, math.inf, 1.7e308])], [(0, EVIL)], EVIL, EVIL, EVIL)
    _finite_svg(svg)
    assert "2 values not plotted (NaN or infinite)" in svg
    assert svg.count("<rect") == 2 + 3 + 5  # ground + three finite cells + legend (one "equal", five scale)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(ANY, max_size=12), max_size=6))
def test_heatmap_never_raises(rows: list[list[Any]]) -> None:
    svg = heatmap("t", [(f"c={i}", r) for i, r in enumerate(rows)], [(0, "0"), (3, "3")], "x", "y", "v")
    _finite_svg(svg)
    bad = sum(1 for r in rows for v in r if v is not None and not finite(v))
    assert (f"{bad} value" in svg) == (bad > 0)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.tuples(ANY, ANY), max_size=10), max_size=5))
def test_strips_never_raise(rows: list[list[tuple[Any, Any]]]) -> None:
    svg = strips(EVIL, [(EVIL, pts) for pts in rows], EVIL)
    _finite_svg(svg)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=5), ANY, st.booleans()), max_size=12))
def test_histogram_never_raises(bins: list[tuple[str, Any, bool]]) -> None:
    svg = histogram(EVIL, bins, EVIL, EVIL, legend=EVIL)
    _finite_svg(svg)
    bad = sum(1 for _, n, _ in bins if not (finite(n) and n >= 0))
    assert (f"{bad} value" in svg) == (bad > 0)


def test_strips_draw_one_bar_per_position() -> None:
    svg = strips("First divergence", [("c=1", [(3, 2), (57, 1)]), ("c=4", [(3, 6)]), ("c=8", [])], "token")
    _finite_svg(svg)
    assert svg.count("<rect") == 3 and "c=8" in svg


@settings(max_examples=100, deadline=None)
@given(st.lists(ANY, min_size=1, max_size=6), st.lists(st.tuples(ANY, ANY), max_size=6))
def test_report_pictures_take_any_figure(values: list[Any], hist: list[tuple[Any, Any]]) -> None:
    """The pictures read a finished entry (``reports.render.pictures``); hostile numbers in it never raise."""
    entry = {
        "reference": {"unit": "token"},
        "levels": [{"concurrency": i, "first_divergence": {"histogram": hist}} for i in range(3)],
        "fork_gaps": {
            "near_tie_steps": 4.0,
            "histogram": [{"lo": 0.0, "hi": 1.0, "count": 1}] + [{"lo": 1.0, "hi": None, "count": v} for v in values],
        },
        "drift_heatmap": {"bin_width": 2, "levels": [0, 1], "max": [values, values[::-1]]},
    }
    canary = cast("Canary", entry)  # the fields the pictures read
    for svg in (
        pictures.fork_gap_chart(canary),
        pictures.drift_heatmap_chart(canary),
        pictures.first_divergence_chart(canary),
    ):
        if svg:
            _finite_svg(svg)
