"""compare: runs aligned by canary and level, deltas against the first run, files written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from runkit import rec, write_run

from collectors.runfolder import ColumnBuilder, load_run
from reports.analysis import analyse
from reports.build import build_report
from reports.compare import compare_reports, write_comparison


def report_of(records: list[dict[str, Any]]) -> dict[str, Any]:
    b = ColumnBuilder()
    for r in records:
        b.add(r)
    return {"run": {"id": "x"}, "canaries": analyse(b.finish())}


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.tuples(st.lists(st.integers(0, 2), max_size=4), st.sampled_from([1, 2, 4])), min_size=1, max_size=12)
)
def test_identical_runs_compare_to_zero_deltas(spec: list[tuple[list[int], int]]) -> None:
    report = report_of([rec(ids, level=lv) for ids, lv in spec])
    cmp = compare_reports([("a", report), ("b", report), ("c", report)])
    for canary in cmp["canaries"]:
        for block in [canary["overall"], *canary["levels"]]:
            for delta in block["deltas"]:
                assert delta is not None
                assert all(v in (0, None) for v in delta.values())


def test_levels_align_and_missing_ones_are_null(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", [rec([1, 2], level=1), rec([1, 2], level=2)])
    b = write_run(tmp_path / "b", [rec([1, 2], level=2), rec([1, 3], level=2), rec([1, 2], level=8)])
    reports = [("a", build_report(load_run(a))), ("b", build_report(load_run(b)))]
    cmp = compare_reports(reports)
    [canary] = cmp["canaries"]
    assert [lv["concurrency"] for lv in canary["levels"]] == [1, 2, 8]
    lv1, lv2, lv8 = canary["levels"]
    assert lv1["runs"][1] is None and lv1["deltas"][1] is None
    assert lv8["runs"][0] is None
    assert lv2["deltas"][1]["unique_completions"] == 1 and lv2["deltas"][1]["divergence_rate"] == 0.5
    paths = write_comparison(cmp, reports, tmp_path / "out")
    assert [p.name for p in paths] == ["comparison.json", "comparison.md", "comparison.html"]
    assert json.loads(paths[0].read_text())["runs"][1]["name"] == "b"
    assert "| 2 | 1 | 2 (+1) |" in paths[1].read_text()
    assert paths[2].read_text().count("<svg") == 4


def test_duplicate_names_are_told_apart() -> None:
    report = report_of([rec([1], level=1)])
    cmp = compare_reports([("run", report), ("run", report)])
    assert [r["name"] for r in cmp["runs"]] == ["run", "run (2)"]
