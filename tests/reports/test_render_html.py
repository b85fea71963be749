"""The HTML report is self-contained and every model-produced string in it stays inert."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

from reports.render.writer import write_reports
from tests.loadgen.cli.clikit import loadgen
from tests.reports.runkit import rec, write_run

EVIL = "<script>alert(1)</script></script><!--"


class Audit(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.handlers: list[str] = []
        self.external: list[str] = []
        self.script_text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script":
            self.scripts.append(a)
            self._in_script = True
        self.handlers += [k for k in a if k.startswith("on")]
        self.external += [v for k, v in a.items() if k in ("src", "href") and v]

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.script_text.append(data)


def evil_run(tmp_path: Path) -> Path:
    records = [rec([1, 2, 3], phase="baseline", tokens=["a", "b", "c"], text="abc")]
    records.append(rec([1, 2, 4], level=1, tokens=["a", "b", EVIL], text=f"ab{EVIL}"))
    records.append(rec([1, 2, 3], level=2, canary=EVIL, tokens=["a", "b", "c"], text="abc"))
    return write_run(tmp_path, records, labels={"who": EVIL})


def test_script_in_a_completion_stays_inert(tmp_path: Path) -> None:
    run_dir = evil_run(tmp_path)
    write_reports(run_dir)
    page = (run_dir / "report.html").read_text()
    audit = Audit()
    audit.feed(page)
    assert audit.scripts == [{"type": "application/json", "id": "report-data"}]  # data, never executed
    assert audit.handlers == [] and audit.external == []  # no event handlers, nothing loaded from outside
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    data = json.loads("".join(audit.script_text))  # the embedded report survives the escaping intact
    assert EVIL in [c["id"] for c in data["canaries"]]
    assert data["run"]["labels"]["who"] == EVIL


def test_markdown_keeps_model_strings_in_code_spans(tmp_path: Path) -> None:
    run_dir = evil_run(tmp_path)
    write_reports(run_dir)
    md = (run_dir / "report.md").read_text()
    assert f"`{EVIL}`" in md  # the fork's other token, as an inert code span
    assert "| 1 | 1 | 0 | 1 | 1 |" in md  # the level-1 row: 1 canary, 0 errors, 1 unique, 1 diverged


def test_page_has_the_verdict_and_the_charts(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path, [rec([1, 2], phase="baseline"), rec([1, 2], level=1), rec([1, 3], level=2)])
    report = write_reports(run_dir)
    page = (run_dir / "report.html").read_text()
    assert report["verdict"] in page
    # five level charts, the drift heatmap and the first-divergence strips; no gap histogram (no top_logprobs)
    assert page.count("<svg") == 7
    assert "earliest divergence at token 1; divergence first seen at concurrency 2" in report["verdict"]


def _report_cli(run_dir: Path) -> str:
    done = loadgen("report", str(run_dir), "--quiet")
    assert done.returncode == 0, done.stderr[-2000:]
    return (run_dir / "report.html").read_text()


def _diverging_run(tmp_path: Path) -> Path:
    ref = list(range(60))
    records = [rec(ref, phase="baseline")]
    for level, at in ((1, 59), (2, 10), (4, 59)):
        records += [rec(ref, level=level), rec([*ref[:at], 999, *ref[at + 1 :]], level=level)]
    return write_run(tmp_path / "div", records, torn_tail=True, started="2026-11-30T11:19:02.640+00:00")


def test_report_charts_keep_legends_off_the_data_and_token_ticks_whole(tmp_path: Path) -> None:
    from tests.reports.svgkit import hits, svgs, tick_labels

    charts = svgs(_report_cli(_diverging_run(tmp_path)))
    (cdf,) = [c for c in charts if c.title.startswith("First divergence: cumulative")]
    assert [n for n, _ in cdf.legend] == ["c=1", "c=2", "c=4"]
    for c in charts:
        for name, box in c.legend:
            assert hits(box, c) == [], f"{c.title}: legend {name!r} covers the data"
    (strips,) = [c for c in charts if c.title.startswith("First divergence position")]
    assert tick_labels(strips)[-4:-1] == ["0", "30", "59"]  # token positions: whole numbers, never 29.5
    unique = next(c for c in charts if c.title.startswith("Unique completions"))
    assert all(float(t.replace(",", "")) == int(float(t.replace(",", ""))) for t in tick_labels(unique)[:3])


def test_verdict_carries_its_cue_and_comes_before_the_notices(tmp_path: Path) -> None:
    page = _report_cli(_diverging_run(tmp_path))
    first_verdict, first_warn = page.index('class="verdict'), page.index('class="warn"')
    assert first_verdict < first_warn  # the answer first, what qualifies it after
    assert 'data-outcome="diverged"' in page and ">Diverged</span>" in page
    assert "<span class='nw'>2026-11-30T11:19:02.640+00:00</span>" in page  # a timestamp never wraps inside
    same = write_run(tmp_path / "same", [rec([1, 2], phase="baseline"), rec([1, 2], level=1), rec([1, 2], level=2)])
    page = _report_cli(same)
    assert 'data-outcome="invariant"' in page and 'data-outcome="diverged"' not in page
    assert ">Invariant</span>" in page


def test_a_note_says_where_the_wilson_interval_and_the_exact_bound_differ(tmp_path: Path) -> None:
    page = _report_cli(_diverging_run(tmp_path))
    note = page.split("bounds-note'>")[1].split("</p>")[0]
    assert "Wilson score interval" in note and "Clopper-Pearson" in note
    assert re.search(r"concurrency 1: Wilson \d+\.\d%, exact \d+\.\d%", note)
