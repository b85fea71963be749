"""comparison.html and report.html laid out by a real headless Chromium: no legend over plotted data (the
boxes the browser measures, not estimates), the verdict above the notices with a cue that tells a
diverging run from an invariant one, timestamps on one line each.

Needs Debian's ``chromium`` and the ``playwright`` package (its driver only), as the web UI's browser test
(``tests/loadgen/load/test_web_ui_browser.py``); skipped when no Chromium is installed, a failure when
LOADGEN_BROWSER_TESTS=1. LOADGEN_SCREENSHOT_DIR=DIR also writes the two pages' screenshots there, for a
look. (``docs/comparison-html.png`` is a 1240x1560 view, every chart in it, of ``loadgen compare`` over the
two runs in ``docs/results/h200/matrix/cells``; ``docs/webui-chart.png`` is the web UI test's
``LOADGEN_SCREENSHOT``.)
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.loadgen.cli.clikit import loadgen
from tests.reports.comparekit import compare_two
from tests.reports.runkit import rec, write_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REQUIRED = os.environ.get("LOADGEN_BROWSER_TESTS") == "1"
pytestmark = pytest.mark.skipif(not CHROMIUM and not REQUIRED, reason="no Chromium installed")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]

# Per chart: the legend entries' boxes, and every plotted mark (dots, line vertices and points along each
# segment, error bars), all in page pixels, as the browser laid them out.
OVERLAPS = """() => {
  const out = [];
  for (const svg of document.querySelectorAll('svg.chart')) {
    const title = (svg.querySelector('.title') || {}).textContent || '';
    const m = svg.getScreenCTM();
    const at = (x, y) => { const p = svg.createSVGPoint(); p.x = x; p.y = y; return p.matrixTransform(m); };
    const marks = [];
    for (const c of svg.querySelectorAll('circle')) marks.push(at(c.cx.baseVal.value, c.cy.baseVal.value));
    const segs = [];
    for (const p of svg.querySelectorAll('polyline')) {
      const pts = Array.from(p.points);
      pts.forEach((a, i) => segs.push([a, pts[i + 1] || a]));
    }
    for (const l of svg.querySelectorAll('line.bar')) {
      segs.push([{x: l.x1.baseVal.value, y: l.y1.baseVal.value}, {x: l.x2.baseVal.value, y: l.y2.baseVal.value}]);
    }
    for (const [a, b] of segs) {
      const n = Math.max(1, Math.ceil(Math.hypot(b.x - a.x, b.y - a.y)));
      for (let i = 0; i <= n; i++) marks.push(at(a.x + (b.x - a.x) * i / n, a.y + (b.y - a.y) * i / n));
    }
    for (const key of svg.querySelectorAll('.legend')) {
      const r = key.getBoundingClientRect();
      const hit = marks.filter(p => p.x >= r.left - 2 && p.x <= r.right + 2 && p.y >= r.top - 2 && p.y <= r.bottom + 2);
      const box = svg.getBoundingClientRect();
      const inside = r.right <= box.right + 0.5 && r.bottom <= box.bottom + 0.5;
      out.push({title, key: key.textContent, hits: hit.length, inside});
    }
  }
  return out;
}"""


def _browser(p: Any) -> Any:
    assert CHROMIUM, "LOADGEN_BROWSER_TESTS=1 but no chromium on PATH"
    return p.chromium.launch(executable_path=CHROMIUM, args=ARGS)


def _shot(page: Any, name: str) -> None:
    if folder := os.environ.get("LOADGEN_SCREENSHOT_DIR"):
        page.screenshot(path=str(Path(folder) / name))


def test_comparison_legends_never_cover_the_data(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    out = compare_two(tmp_path)
    with sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": 1240, "height": 1000})
        page.goto((out / "comparison.html").as_uri())
        keys = page.evaluate(OVERLAPS)
        _shot(page, "comparison-html.png")
        browser.close()
    titles = {k["title"] for k in keys}
    assert len(titles) == 6 and any("frontier" in t for t in titles)
    assert [k for k in keys if k["hits"] or not k["inside"]] == []


def _diverging(tmp_path: Path) -> Path:
    ref = list(range(40))
    records = [rec(ref, phase="baseline")]
    for level, at in ((1, 30), (2, 12), (4, 30)):
        records += [rec(ref, level=level), rec([*ref[:at], 999, *ref[at + 1 :]], level=level), rec(ref, level=level)]
    started, finished = "2026-11-30T11:19:02.640+00:00", "2026-11-30T11:26:02.982+00:00"
    return write_run(tmp_path / "div", records, torn_tail=True, started=started, finished=finished)


def test_report_verdict_reads_first_and_tells_diverged_from_invariant(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    div = _diverging(tmp_path)
    same = write_run(tmp_path / "same", [rec([1, 2], phase="baseline"), rec([1, 2], level=1), rec([1, 2], level=2)])
    for run in (div, same):
        done = loadgen("report", str(run), "--quiet")
        assert done.returncode == 0, done.stderr[-2000:]
    with sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": 1240, "height": 1000})
        cues = {}
        for run in (div, same):
            page.goto((run / "report.html").as_uri())
            verdict = page.locator(".verdict").first
            cue = verdict.locator(".cue")
            cues[run.name] = (cue.inner_text(), cue.evaluate("e => getComputedStyle(e).backgroundColor"))
            if run is div:
                assert verdict.bounding_box()["y"] < page.locator(".warn").first.bounding_box()["y"]
                lines = page.locator(".nw").evaluate_all("els => els.map(e => e.getClientRects().length)")
                assert lines == [1, 1]  # each timestamp on one line
                assert [k for k in page.evaluate(OVERLAPS) if k["hits"] or not k["inside"]] == []
                _shot(page, "report-html.png")
        browser.close()
    assert cues["div"][0].lower() == "diverged" and cues["same"][0].lower() == "invariant"
    assert cues["div"][1] != cues["same"][1]  # a different colour, not only a different word
