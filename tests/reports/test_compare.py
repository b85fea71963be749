"""compare: runs aligned by canary and level, deltas against the first run, files written."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.read.runfolder import ColumnBuilder, load_run
from reports.analysis.build import build_report
from reports.analysis.canary import analyse
from reports.compare.runs import compare_reports, render_markdown, write_comparison
from reports.model.report import Report
from tests.loadgen.cli.clikit import loadgen
from tests.reports.runkit import partial_report, rec, write_run


def report_of(records: list[dict[str, Any]]) -> Report:
    b = ColumnBuilder()
    for r in records:
        b.add(r)
    return partial_report(run={"id": "x"}, canaries=analyse(b.finish()))


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
    assert (delta := lv2["deltas"][1]) is not None
    assert delta["unique_completions"] == 1 and delta["divergence_rate"] == 0.5
    paths = write_comparison(cmp, reports, tmp_path / "out")
    assert [p.name for p in paths] == ["comparison.json", "comparison.md", "comparison.html"]
    assert json.loads(paths[0].read_text())["runs"][1]["name"] == "b"
    md = paths[1].read_text()
    assert "- **A**: `a`" in md and "- **B**: `b`" in md  # the legend names runs by letter
    unique = md.split("#### Unique completions")[1].split("####")[0]
    assert "| concurrency | A | B |" in unique and "| 2 | 1 | 2 (+1) |" in unique
    assert "| 1 | 1 | — |" in unique  # run b has no level 1: a dash, never 0
    html = paths[2].read_text()
    assert html.count("<svg") == 5 and "Earliest divergence vs concurrency" in html


def test_duplicate_names_are_told_apart() -> None:
    report = report_of([rec([1], level=1)])
    cmp = compare_reports([("run", report), ("run", report)])
    assert [r["name"] for r in cmp["runs"]] == ["run", "run (2)"]


LEVELS = [0, 1, 4, 16, 64, 256]


def _d3_run(tmp_path: Path, name: str, prefix_caching: str, invariant: str, seed: int) -> Path:
    """A run as the D3 matrix writes one: two canaries, six levels, a long folder name, background traffic,
    and (unless batch-invariant) completions that fork at a few positions, more often under more load."""
    records = []
    for canary in ("long", "short"):
        records += [rec([1, 2, 3, 4, 5, 6], phase="baseline", canary=canary) for _ in range(3)]
        for i, level in enumerate(LEVELS):
            for k in range(6):
                if invariant == "0" and k < (i + seed) % 6:
                    ids = [1, 2, 3, 4, 5, 6]
                    ids[(k + seed) % 5 + 1] = 90 + k  # forks at a position that varies with k
                elif k == 5 and level == 256:
                    records.append(rec(None, level=level, canary=canary, status="error", error_kind="timeout"))
                    continue
                else:
                    ids = [1, 2, 3, 4, 5, 6]
                records.append(rec(ids, level=level, canary=canary))
    background = [
        {"level": lv, "sent_at": 1_700_000_000.0 + j, "latency_s": 1.5, "status": "ok", "completion_tokens": 123 + seed}
        for lv in LEVELS[1:]
        for j in range(4)
    ]
    return write_run(
        tmp_path / name,
        records,
        labels={"prefix_caching": prefix_caching, "batch_invariant": invariant},
        extra={"background.jsonl": background},
    )


def test_four_runs_compare_in_tables_no_wider_than_100_columns(tmp_path: Path) -> None:
    cells = [("1", "0"), ("1", "1"), ("0", "0"), ("0", "1")]
    runs = [
        _d3_run(tmp_path, f"20261130T11{32 + i}17Z-vllm-d3-2x2", pc, bi, seed=i) for i, (pc, bi) in enumerate(cells)
    ]
    out = tmp_path / "cmp"
    done = loadgen("compare", *map(str, runs), "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    md = (out / "comparison.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("|")]
    assert len(rows) > 100  # per canary: four metric tables of 7 rows and a cost table of 28 rows, with headers
    too_wide = [line for line in rows if len(line) > 100]
    assert too_wide == []
    # every run named once in the legend, by letter, with its labels; tables name runs by letter only
    for letter, run, (pc, bi) in zip("ABCD", runs, cells, strict=True):
        assert f"- **{letter}**: `{run.name}`" in md and f"prefix_caching={pc}" in md
        assert f"batch-invariant {'on' if bi == '1' else 'off'}" in md
    assert not any(run.name in line for run in runs for line in rows)
    assert md.count("| concurrency | A | B | C | D |") == 2 * 4  # two canaries, four metrics, wide form
    cmp = json.loads((out / "comparison.json").read_text())
    assert [r["label"] for r in cmp["runs"]] == ["A", "B", "C", "D"]
    assert [r["name"] for r in cmp["runs"]] == [r.name for r in runs]
    # the HTML: per canary, each chart overlays the four runs (one line per run, named by letter)
    html = (out / "comparison.html").read_text()
    charts = _svgs(html)
    earliest = [svg for svg in charts if "Earliest divergence vs concurrency" in svg]
    assert len(earliest) == 2
    for svg in charts:
        ET.fromstring(svg)
    for title in ("Unique completions vs concurrency", "Divergence rate vs concurrency"):
        (first, *_) = [svg for svg in charts if title in svg]
        tree = ET.fromstring(first)
        assert [t.text for t in tree.findall(".//text[@class='legend']")] == ["A", "B", "C", "D"]
        assert len(tree.findall("polyline")) >= 4


@settings(max_examples=15, deadline=None)
@given(st.integers(2, 12), st.lists(st.integers(0, 1000), min_size=1, max_size=6, unique=True))
def test_markdown_tables_stay_within_100_columns_for_any_number_of_runs(runs: int, levels: list[int]) -> None:
    """Many runs no longer fit a column each: those tables turn long form (a row per level and run)."""
    records = [rec([1, 2, 3], phase="baseline")]
    for n, level in enumerate(sorted(levels)):
        records += [rec([1, 2, 3], level=level), rec([1, 9 + n, 3], level=level), rec([4, 2, 3], level=level)]
    report = report_of(records)
    cmp = compare_reports([(f"20261130T1132{i:02d}Z-a-rather-long-scenario-name", report) for i in range(runs)])
    md = render_markdown(cmp)
    assert [line for line in md.splitlines() if line.startswith("|") and len(line) > 100] == []
    unique = md.split("#### Unique completions")[1].split("####")[0]
    body = [line for line in unique.splitlines() if line.startswith("| ") and not line.startswith("| concurrency")]
    wide = len(body) == len(levels) + 1
    assert wide or len(body) == (len(levels) + 1) * runs  # long form: a row per level and run
    assert wide or runs > 4  # four runs always fit a column each
    assert not wide or runs < 12  # twelve columns of "3 (+0)" cannot
    for level in levels:
        assert sum(line.startswith(f"| {level} | ") for line in body) == (1 if wide else runs)


def _svgs(html: str) -> list[str]:
    return ["<svg" + s.split("</svg>")[0] + "</svg>" for s in html.split("<svg")[1:]]


def test_compare_checks_every_runs_reference_against_the_first_runs(tmp_path: Path) -> None:
    """Two engines that never diverge inside themselves can still answer differently alone: ``loadgen compare``
    says which run broke run A's reference and where, also for two folders of one name (run, run (2))."""

    def one(folder: Path, reference: list[int]) -> Path:
        return write_run(folder, [rec(reference, phase="baseline"), *(rec(reference, level=lv) for lv in (0, 8))])

    a = one(tmp_path / "x" / "run", [1, 2, 3, 4, 5, 6])
    b = one(tmp_path / "y" / "run", [1, 2, 3, 7, 5, 6])
    c = one(tmp_path / "z" / "other", [1, 2, 3, 4, 5, 6])
    out = tmp_path / "cmp"
    done = loadgen("compare", str(a), str(b), str(c), "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    cmp = json.loads((out / "comparison.json").read_text())
    verdicts = {(r["run"], r["compared_with"]): (r["verdict"], r["first_divergence"]) for r in cmp["references"]}
    assert verdicts == {("run (2)", "run"): ("diverged", 3), ("other", "run"): ("same", None)}
    md = (out / "comparison.md").read_text()
    assert "- run (2)'s reference differs from run's: c0 at token 3" in md
