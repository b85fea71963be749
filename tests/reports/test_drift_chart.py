"""The drift chart says how much each point measured: a max over three positions is not a max over three hundred.

A run folder written by hand, its report built and rendered by the real writer; the chart is read back from
``report.html``'s SVG: each max point carries an ``n=`` label (token positions compared before divergence), and
every point's hover text says the positions and completions behind it, as ``report.json`` counts them.
"""

from __future__ import annotations

import json
from pathlib import Path

from reports.render.writer import write_reports
from tests.loadgen.cli.clikit import loadgen
from tests.reports.runkit import rec, write_run
from tests.reports.svgkit import svgs

TITLE = "Logprob drift before divergence vs concurrency"


def drift_run(tmp_path: Path) -> Path:
    """Level 1: two completions equal to the reference (4 positions each, one drifting); level 2: one that
    diverges at position 2 (2 positions compared before it)."""
    records = [rec([1, 2, 3, 4], phase="baseline", logprobs=[-1.0, -2.0, -3.0, -4.0])]
    records += [rec([1, 2, 3, 4], level=1, logprobs=[-1.0, -2.0, -3.0, -4.0])]
    records += [rec([1, 2, 3, 4], level=1, logprobs=[-1.0, -2.5, -3.0, -4.0])]
    records += [rec([1, 2, 9, 9], level=2, logprobs=[-1.25, -2.0, -3.0, -4.0])]
    return write_run(tmp_path / "run", records, levels=[1, 2])


def test_each_drift_point_shows_the_positions_it_measured(tmp_path: Path) -> None:
    run_dir = drift_run(tmp_path)
    write_reports(run_dir)
    levels = json.loads((run_dir / "report.json").read_text())["canaries"][0]["levels"]
    drift = {lv["concurrency"]: lv["logprob_drift"] for lv in levels}
    assert {c: (d["compared"], d["positions"]) for c, d in drift.items()} == {1: (2, 8), 2: (1, 2)}

    (chart,) = [c for c in svgs((run_dir / "report.html").read_text()) if c.title == TITLE]
    tags = [t.text for t in chart.root.iter("text") if t.get("class") == "point-label"]
    assert tags == ["n=8", "n=2"]  # beside the max line's points, level by level
    hovers = [t.text or "" for t in chart.root.iter("title")]
    assert hovers == [
        "this run (max), concurrency 1: 0.5 (8 positions over 2 completions)",
        "this run (max), concurrency 2: 0.25 (2 positions over 1 completion)",
        "this run (mean), concurrency 1: 0.0625 (8 positions over 2 completions)",
        "this run (mean), concurrency 2: 0.125 (2 positions over 1 completion)",
    ]


def test_a_comparison_labels_each_runs_points(tmp_path: Path) -> None:
    """``loadgen compare`` draws the same chart per run: every run's max points carry their own ``n=``."""
    a, b = drift_run(tmp_path / "a"), drift_run(tmp_path / "b")
    done = loadgen("compare", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert done.returncode == 0, done.stderr
    (chart,) = [c for c in svgs((tmp_path / "cmp" / "comparison.html").read_text()) if c.title == TITLE]
    tags = [t.text for t in chart.root.iter("text") if t.get("class") == "point-label"]
    assert tags == ["n=8", "n=2", "n=8", "n=2"]
    hovers = [t.text or "" for t in chart.root.iter("title")]
    assert "B (max), concurrency 2: 0.25 (2 positions over 1 completion)" in hovers
