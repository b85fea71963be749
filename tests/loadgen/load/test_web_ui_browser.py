"""The web UI in a real headless Chromium: start a run from the form, watch the tab fill, open the report.

Needs Debian's ``chromium`` and the ``playwright`` package (its driver only; no browser download).
``.ci/run`` installs both and sets LOADGEN_BROWSER_TESTS=1, which turns a missing browser into a
failure; elsewhere the test is skipped when no Chromium is installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from loadgen.studies.ui_session import LOG_NAME
from tests.loadgen.stop_process import stop

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REQUIRED = os.environ.get("LOADGEN_BROWSER_TESTS") == "1"
pytestmark = pytest.mark.skipif(not CHROMIUM and not REQUIRED, reason="no Chromium installed")
HEADINGS = (
    "Canary",
    "Concurrency",
    "Canaries",
    "Errors",
    "Unique completions",
    "Diverged",
    "Rate (95% CI)",
    "Earliest divergence",
    "Drift max",
    "Bitwise equal",
    "Others min/med/max",
    "Held at send",
    "Held throughout",
)  # the tab's columns, in order (loadgen.load.webui.COLUMNS)
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture
def ui(engine_url: str, tmp_path: Path, free_port: int, wait_http: Callable[[str], None]) -> Iterator[str]:
    port = free_port
    cmd = [
        sys.executable,
        "-m",
        "loadgen",
        "run",
        "--ui",
        "--host",
        engine_url,
        "--web-port",
        str(port),
        "--out",
        str(tmp_path),
    ]
    with open(tmp_path / "ui.log", "wb") as log:  # a file, not a pipe nobody reads: Locust logs a lot
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc, tmp_path / "ui.log", tmp_path / LOG_NAME)


def test_start_from_form_watch_tab_open_report(ui: str, tmp_path: Path) -> None:
    assert CHROMIUM, "LOADGEN_BROWSER_TESTS=1 but no chromium on PATH"
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        page.goto(ui + "/")
        page.get_by_role("button", name="Custom parameters").click()
        page.locator("input[name=levels]").fill("0, 4, 16")  # typed as text: normalised to integers
        page.locator("input[name=canariesPerLevel]").fill("5")
        page.locator("input[name=labels]").fill("from=browser")
        page.get_by_role("button", name="Start").click()
        page.get_by_role("tab", name="Batch invariance").click()
        table = page.locator("table").first
        expect(table).to_contain_text("Unique completions")
        # the report's per-level columns (rate, drift max, bitwise equal, others, held throughout) and progress's
        # held at send beside the live counts
        expect(table.locator("thead th")).to_have_text(list(HEADINGS))
        # the tab fills while the run goes: the level-16 row appears with all 5 canaries counted (its
        # concurrency cell is exactly "16": another level's row may hold a 16 in another cell)
        level16 = page.locator("td:nth-child(2)", has_text=re.compile(r"^\s*16\s*$"))
        row16 = table.locator("tr", has_text="story").filter(has=level16)
        expect(row16.first).to_be_visible(timeout=120_000)
        # the charts beside the table were drawn when the tab opened (no level yet) and follow the table
        charts = page.locator("#loadgen-live-chart .lg-live")
        expect(charts).to_have_attribute("data-levels", "0 4 16", timeout=30_000)
        page.get_by_role("tab", name="Statistics").click()  # another tab: no charts there
        expect(page.locator("#loadgen-live-chart")).to_have_count(0)
        page.get_by_role("tab", name="Batch invariance").click()
        expect(charts).to_be_visible()
        deadline = time.monotonic() + 180
        while (state := json.loads(urllib.request.urlopen(ui + "/stats/requests").read())["state"]) != "stopped":
            assert time.monotonic() < deadline, f"run did not stop: state {state}"
            time.sleep(0.5)
        # Locust's page stops polling once it has seen "cleanup" (background requests finishing): reload
        page.reload()
        expect(page.locator("header")).to_contain_text("stopped", ignore_case=True, timeout=30_000)
        page.get_by_role("tab", name="Batch invariance").click()
        cells = dict(zip(HEADINGS, [c.inner_text() for c in row16.first.locator("td").all()], strict=True))
        assert [cells["Canary"], cells["Concurrency"], cells["Canaries"]] == ["story", "16", "5"]
        # the report's own cells once it is written (test_web_ui.py compares them with report.md's)
        assert re.fullmatch(r"\d+\.\d% \(\d+\.\d–\d+\.\d%\)", cells["Rate (95% CI)"]), cells
        assert re.fullmatch(r"\d+/\d+(\.\d+)?/\d+", cells["Others min/med/max"]), cells  # the engine's batch sizes
        assert re.fullmatch(r"\d+/5", cells["Held throughout"]) and re.fullmatch(r"\d+/16", cells["Held at send"])
        assert "at the end" not in cells.values()
        expect(charts).to_have_attribute("data-levels", "0 4 16")  # placed again after the reload
        _check_charts_match_table(page)
        if shot := os.environ.get("LOADGEN_SCREENSHOT"):
            page.screenshot(path=shot, full_page=True)
        page.get_by_role("tab", name="Download data").click()
        link = page.get_by_role("link", name="Batch-invariance report of the last finished run (HTML)")
        href = link.get_attribute("href")
        assert href == "/loadgen/report"
        page.goto(ui + href)
        expect(page.locator("h1")).to_have_text("Batch-invariance report")
        expect(page.get_by_text("from=browser")).to_be_visible()
        browser.close()
    (run_dir,) = [p.parent for p in tmp_path.glob("*/report.html")]  # one start, one run folder
    assert "from" in (run_dir / "manifest.json").read_text()


def _check_charts_match_table(page: Any) -> None:
    """Each chart has one point per level that has a figure, with the value the table shows there."""
    from playwright.sync_api import expect

    rows = page.locator("table").first.locator("tbody tr").all()
    table: dict[int, tuple[int, int, str, str]] = {}
    for row in rows:
        cells = dict(zip(HEADINGS, [c.inner_text() for c in row.locator("td").all()], strict=True))
        if (level := cells["Concurrency"]) != "baseline":
            completions = int(cells["Canaries"]) - int(cells["Errors"])
            table[int(level)] = (
                completions,
                int(cells["Unique completions"]),
                cells["Diverged"],
                cells["Earliest divergence"],
            )
    assert sorted(table) == [0, 4, 16]
    expected: dict[str, dict[int, float]] = {
        "Unique completions vs concurrency": {lv: u for lv, (_, u, _, _) in table.items()},
        "Divergence rate vs concurrency": {lv: int(d) / n for lv, (n, _, d, _) in table.items()},
        "Earliest divergence vs concurrency": {lv: int(e) for lv, (_, _, _, e) in table.items() if e.isdigit()},
    }
    for title, points in expected.items():
        svg = page.locator("#loadgen-live-chart svg", has_text=title)
        expect(svg).to_be_visible()
        hover = sorted(t.text_content() for t in svg.locator("circle title").all())
        assert hover == sorted(f"story, concurrency {lv}: {v:.3g}" for lv, v in points.items()), title
