"""comparison.html as ``loadgen compare`` writes it: legends below the data in every chart, ticks that
read as numbers, the frontier's points named by level and its runs by letter, one latency percentile set
in charts and tables, one number format per cost column."""

from __future__ import annotations

import re
from pathlib import Path

from tests.loadgen.cli.clikit import loadgen, loadgen_process
from tests.reports.comparekit import compare_two
from tests.reports.svgkit import EXPONENT, hits, svgs, tick_labels


def test_every_legend_sits_outside_the_plotted_data(tmp_path: Path) -> None:
    charts = svgs((compare_two(tmp_path) / "comparison.html").read_text())
    assert len(charts) == 6  # five level charts and the frontier
    for c in charts:
        assert c.legend, c.title
        for name, box in c.legend:
            assert hits(box, c) == [], f"{c.title}: legend {name!r} covers the data"
            assert box[2] <= c.width + 0.5 and box[3] <= c.height, f"{c.title}: legend {name!r} leaves the picture"


def test_frontier_names_runs_by_letter_and_points_by_level(tmp_path: Path) -> None:
    (frontier,) = [c for c in svgs((compare_two(tmp_path) / "comparison.html").read_text()) if "frontier" in c.title]
    assert [n for n, _ in frontier.legend] == ["A (batch-invariant off)", "B (batch-invariant on)"]
    tags = sorted(t.text or "" for t in frontier.root.iter("text") if t.get("class") == "point-label")
    assert tags == ["c=2", "c=2", "c=8", "c=8"]
    ticks = tick_labels(frontier)
    assert "1,000" in ticks and "2,000" in ticks and not [t for t in ticks if EXPONENT.search(t)]
    right = [t for t in frontier.root.iter("text") if t.text == "2,000"]
    assert right and all(t.get("text-anchor") == "end" for t in right)  # the edge tick stays inside the picture


def test_one_latency_percentile_set_in_charts_and_tables(tmp_path: Path) -> None:
    out = compare_two(tmp_path)
    html = (out / "comparison.html").read_text()
    (latency,) = [c for c in svgs(html) if c.title.startswith("Canary latency")]
    assert [n for n, _ in latency.legend] == ["A p50", "B p50", "A p99", "B p99"]
    assert "<th>canary p50 s</th><th>canary p99 s</th>" in html
    assert "p90" not in html and "p90" not in (out / "comparison.md").read_text()


def test_each_run_keeps_one_colour_in_every_chart(tmp_path: Path) -> None:
    """A run's colour is the run's, not its series' position: A's p99 line (and its drift mean) is A's colour,
    and so are its dots and its legend entries, in all six charts; B has another."""
    charts = svgs((compare_two(tmp_path) / "comparison.html").read_text())
    colour: dict[str, set[str]] = {"A": set(), "B": set()}
    for c in charts:
        keys = [t for t in c.root.iter("text") if t.get("class") == "legend"]
        assert len(keys) >= 2, c.title
        for t in keys:
            colour[(t.text or "")[0]].add(t.get("fill", ""))
        for dot in c.root.iter("circle"):
            run = (dot.findtext("title") or "")[0]
            colour[run].add(dot.get("fill", ""))
        lines = [p.get("stroke", "") for p in c.root.iter("polyline")]
        assert set(lines) <= colour["A"] | colour["B"], c.title
    assert len(colour["A"]) == 1 and len(colour["B"]) == 1 and colour["A"] != colour["B"], colour


def test_cost_columns_keep_one_number_format(tmp_path: Path) -> None:
    out = compare_two(tmp_path)
    md = (out / "comparison.md").read_text()
    rows = [
        line for line in md.split("#### Cost beside determinism")[1].splitlines() if re.match(r"\| (\d|overall)", line)
    ]
    cols = list(zip(*[[c.strip() for c in line.strip("|").split("|")] for line in rows], strict=True))
    tokens = [v for v in cols[3] if v != "—"]
    assert tokens and "1,100" in tokens and "875" in tokens and not [v for v in tokens if "e+" in v]
    for col in cols[3:]:
        places = {len(v.split(".")[1]) if "." in v else 0 for v in col if v != "—"}
        assert len(places) <= 1, col  # the same decimals on every row of a column
    html = (out / "comparison.html").read_text()
    cost = html.split("Cost beside determinism")[1].split("</table>")[0]
    assert "1,100" in cost and "e+" not in cost


def test_a_cold_boot_matrix_shows_its_answer_in_html_not_one_dot_charts(tmp_path: Path) -> None:
    """``loadgen matrix d3-2x2``: comparison.html has the first-request-versus-the-rest table (the D3 answer),
    and no chart versus concurrency (every cell ran at concurrency 0 only); ``loadgen compare`` over two of
    its cells' run folders finds their ``coldboot.json`` and shows the same table."""
    out = tmp_path / "d3"
    args = ["matrix", "d3-2x2", "--out", str(out), "--boots", "2", "--requests", "3", "--quiet"]
    done = loadgen_process(*args, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    html = (out / "comparison.html").read_text()
    table = html.split("<table class='coldboot'>")[1].split("</table>")[0]
    rows = re.findall(
        r"<tr><td class='l'><b>([A-D])</b></td><td class='l'><code>(\w+)</code></td><td>(\d+ / \d+)</td>", table
    )
    assert len(rows) == 8  # four cells x two canaries
    got = {(letter, canary): frac for letter, canary, frac in rows}
    assert got.pop(("A", "short")) == "2 / 2"  # prefix caching on, invariance off: the first request differs
    assert set(got.values()) == {"0 / 2"}
    sequences = re.findall(r"<div><code>([^<]*)</code></div>", table)
    assert "c1 c2 c2" in sequences  # completions by label, never by a letter, which names a run in this table
    assert not {w for seq in sequences for w in seq.split()} - {"x", "c1", "c2", "c3"}, sequences
    assert "vs concurrency" not in html and "One concurrency level in every run" in html
    assert "### First request after a cold boot versus the rest" in (out / "comparison.md").read_text()
    cells = [next((out / "cells" / name).iterdir()) for name in ("apc-on_invariant-0", "apc-off_invariant-0")]
    again = tmp_path / "again"
    compared = loadgen("compare", *map(str, cells), "--out", str(again))
    assert compared.returncode == 0, compared.stderr[-2000:]
    assert "<td class='l'><code>short</code></td><td>2 / 2</td>" in (again / "comparison.html").read_text()
