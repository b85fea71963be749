"""The web UI's guard in a real headless Chromium: ``--web-login``'s page, a refused change or value in the form.

Skipped like ``test_web_ui_browser.py`` when no Chromium is installed (a failure with LOADGEN_BROWSER_TESTS=1).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from loadgen.studies.ui_session import LOG_NAME
from tests.loadgen.stop_process import stop

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REQUIRED = os.environ.get("LOADGEN_BROWSER_TESTS") == "1"
pytestmark = pytest.mark.skipif(not CHROMIUM and not REQUIRED, reason="no Chromium installed")
PASSWORD = f"pw-{uuid.uuid4().hex}"


def test_login_then_a_changed_out_dir_is_refused_in_the_page(
    fault_server: str, tmp_path: Path, free_port: int, wait_http: Callable[[str], None]
) -> None:
    assert CHROMIUM, "LOADGEN_BROWSER_TESTS=1 but no chromium on PATH"
    from playwright.sync_api import expect, sync_playwright

    out, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    cmd = [sys.executable, "-m", "loadgen", "run", "--ui", "--web-login", "--host", fault_server]
    cmd += ["--web-port", str(free_port), "--out", str(out), "--levels", "0", "--canaries-per-level", "1"]
    with open(tmp_path / "ui.log", "wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "LOADGEN_WEB_PASSWORD": PASSWORD}
        )
    base = f"http://127.0.0.1:{free_port}"
    try:
        wait_http(base + "/login")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page()
            page.goto(base + "/")
            assert "/login" in page.url  # no session: the login page, not the UI
            page.locator("input[name=username]").fill("loadgen")
            page.locator("input[name=password]").fill("wrong")
            page.get_by_role("button", name="Login").click()
            expect(page.get_by_text("Wrong user name or password")).to_be_visible()
            page.locator("input[name=username]").fill("loadgen")
            page.locator("input[name=password]").fill(PASSWORD)
            page.get_by_role("button", name="Login").click()
            page.get_by_role("button", name="Custom parameters").click()
            page.locator("input[name=outDir]").fill(str(elsewhere))
            page.get_by_role("button", name="Start").click()
            expect(page.get_by_text("fixed when the web UI was started")).to_be_visible()
            browser.close()
    finally:
        stop(proc, tmp_path / "ui.log", out / LOG_NAME)
    # nothing ran: no folder elsewhere, and none in the launch folder beside the session's own log
    assert not elsewhere.exists() and (not out.exists() or [p.name for p in out.iterdir()] == ["locust-ui.log"])


def test_a_start_with_a_bad_level_says_why_in_the_page(
    fault_server: str, tmp_path: Path, free_port: int, wait_http: Callable[[str], None]
) -> None:
    """Levels typed as ``0,abc``: the page shows why beside the form and no run starts (before, the start went
    and the page showed an empty stopped run, the reason only in the terminal)."""
    assert CHROMIUM, "LOADGEN_BROWSER_TESTS=1 but no chromium on PATH"
    from playwright.sync_api import expect, sync_playwright

    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "loadgen", "run", "--ui", "--host", fault_server]
    cmd += ["--web-port", str(free_port), "--out", str(out)]
    with open(tmp_path / "ui.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{free_port}"
    try:
        wait_http(base + "/")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page()
            page.goto(base + "/")
            page.get_by_role("button", name="Custom parameters").click()
            page.locator("input[name=levels]").fill("0,abc")
            page.get_by_role("button", name="Start").click()
            expect(page.get_by_text("--levels: expected comma-separated non-negative integers")).to_be_visible()
            browser.close()
    finally:
        stop(proc, tmp_path / "ui.log", out / LOG_NAME)
    assert [p.name for p in out.iterdir()] == [LOG_NAME]  # nothing ran
