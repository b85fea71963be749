"""Fork classification (``reports.analysis.forks``) on constructed gaps, and through the report on hand-made runs:
a near-tie flip versus a structural divergence, counts that add up to the divergent canaries."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.read.runfolder import load_run
from reports.analysis import forks
from reports.analysis.build import build_report
from reports.model.report import Report
from reports.render.html import render_html
from reports.render.md import render_markdown
from tests.reports.runkit import rec, write_run

ANY_FLOAT = st.floats() | st.sampled_from([math.nan, math.inf, -math.inf, 1.7e308, -1.7e308, 0.0, -0.0])


def test_step_is_the_relative_step_of_the_runner_up_logprob() -> None:
    # |l1| + gap = |l2|: 0.70 + 0.01 = 0.71, times 2^-8
    assert forks.rounding_step([-0.70], [0.01])[0] == pytest.approx(0.71 * 2.0**-8)
    codes, step, steps = forks.classify([-0.70, -0.70, -0.1, -0.7, -0.7], [0.005, 0.5, math.nan, -1.0, math.inf])
    assert codes.tolist() == [forks.NEAR_TIE, forks.STRUCTURAL, forks.UNCLASSIFIED, forks.UNCLASSIFIED, 2]
    assert steps[0] == pytest.approx(0.005 / (0.705 * 2.0**-8))
    assert math.isnan(step[2]) and math.isnan(steps[2])


def test_the_line_is_near_tie_steps_rounding_steps() -> None:
    l1 = -0.69
    # solve gap = K * 2^-8 * (|l1| + gap) for the gap exactly at the line
    k = forks.NEAR_TIE_STEPS * forks.LOGIT_RELATIVE_STEP
    line = k * abs(l1) / (1 - k)
    codes, _, steps = forks.classify([l1, l1], [line * 0.999, line * 1.001])
    assert codes.tolist() == [forks.NEAR_TIE, forks.STRUCTURAL]
    assert steps[0] <= forks.NEAR_TIE_STEPS < steps[1]


def test_gap_histogram_bins_in_steps() -> None:
    hist = forks.gap_histogram([0.5, 1.0, 3.9, 4.0, 300.0, math.nan, math.inf, -1.0])
    by = {(b["lo"], b["hi"]): b["count"] for b in hist}
    assert by[(0.0, 1.0)] == 1 and by[(1.0, 2.0)] == 1 and by[(2.0, 4.0)] == 1 and by[(4.0, 8.0)] == 1
    assert by[(256.0, None)] == 1 and sum(by.values()) == 5  # NaN, inf and a negative left out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(ANY_FLOAT, ANY_FLOAT), max_size=40))
def test_classes_always_add_up(pairs: list[tuple[float, float]]) -> None:
    top1 = [a for a, _ in pairs]
    gap = [b for _, b in pairs]
    codes, step, steps = forks.classify(top1, gap)
    counted = forks.counts(codes)
    assert counted["near_tie"] + counted["structural"] + counted["unclassified"] == len(pairs)
    ok = codes != forks.UNCLASSIFIED
    assert np.isfinite(steps[ok]).all() and (step[ok] > 0).all()
    assert sum(b["count"] for b in forks.gap_histogram(steps)) == int(ok.sum())


def _top(gaps: list[float], l1: float = -0.7) -> list[list[list[Any]]]:
    return [[["a", l1], ["b", l1 - g]] for g in gaps]


def _run(tmp_path: Path, pattern: list[tuple[int, list[int]]]) -> Report:
    """Reference 1 2 3 4 with a near-tie gap at position 1 and a clear one at position 2."""
    ref_top = _top([2.0, 0.002, 3.0, 1.0])
    records = [rec([1, 2, 3, 4], phase="baseline", logprobs=[-0.1, -0.7, -0.05, -0.2], top=ref_top)]
    records += [rec(ids, level=lv, logprobs=[-0.1, -0.7, -0.05, -0.2]) for lv, ids in pattern]
    return build_report(load_run(write_run(tmp_path / "run", records)))


def test_a_near_tie_flip_and_a_structural_divergence(tmp_path: Path) -> None:
    report = _run(tmp_path, [(0, [1, 2, 3, 4]), (1, [1, 9, 3, 4]), (2, [1, 9, 3, 4]), (2, [1, 2, 8, 4])])
    entry = report["canaries"][0]
    assert [lv["fork_classes"] for lv in entry["levels"]] == [
        {"near_tie": 0, "structural": 0, "unclassified": 0},
        {"near_tie": 1, "structural": 0, "unclassified": 0},
        {"near_tie": 1, "structural": 1, "unclassified": 0},
    ]
    assert entry["overall"]["fork_classes"] == {"near_tie": 2, "structural": 1, "unclassified": 0}
    by_pos = {f["position"]: f for f in entry["forks"]}
    assert by_pos[1]["class"] == "near_tie" and by_pos[2]["class"] == "structural"
    # position 1: l1 = -0.7, gap 0.002: step = 2^-8 * 0.702
    assert by_pos[1]["rounding_step"] == pytest.approx(0.702 / 256)
    assert by_pos[1]["gap_steps"] == pytest.approx(0.002 / (0.702 / 256))
    g = entry["fork_gaps"]
    assert (g["relative_step"], g["near_tie_steps"]) == (forks.LOGIT_RELATIVE_STEP, forks.NEAR_TIE_STEPS)
    assert sum(b["count"] for b in g["histogram"]) == 3
    md = render_markdown(report)
    assert "| overall | 3 | 2 | 1 | 0 |" in md and "near\\_tie" not in md and "near_tie" in md
    html = render_html(report)
    assert "Fork gaps: reference top-1" in html and "near-tie flips" in html


def test_without_top_logprobs_forks_are_unclassified(tmp_path: Path) -> None:
    records = [rec([1, 2, 3], phase="baseline"), rec([1, 9, 3], level=1), rec([1, 2, 3, 7], level=1)]
    entry = build_report(load_run(write_run(tmp_path / "run", records)))["canaries"][0]
    lv = entry["levels"][0]
    assert lv["diverged"] == 2 and lv["fork_classes"] == {"near_tie": 0, "structural": 0, "unclassified": 2}
    assert {f["class"] for f in entry["forks"]} == {"unclassified"}
    assert all(f["gap_steps"] is None for f in entry["forks"])
