"""The HTML report is self-contained and every model-produced string in it stays inert."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

from runkit import rec, write_run

from reports.writer import write_reports

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
