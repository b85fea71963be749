"""``loadgen run --ui``: Locust's web UI on the scenario; a start from its form, with values typed as text."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from collectors.jsonl import read_jsonl
from loadgen.core.manifest import read_manifest
from loadgen.studies.ui_session import LOG_NAME
from tests.loadgen.stop_process import stop


def _launch(log_path: Path, *args: str, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """``loadgen run --ui ARGS``, its output into ``log_path``: a file, not a pipe, Locust logs a lot and would block
    on a full pipe."""
    with open(log_path, "wb") as log:
        cmd = [sys.executable, "-m", "loadgen", "run", "--ui", *args]
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=cwd)


def _post_form(base: str, form: dict[str, str]) -> Any:
    """The web UI's answer to a start from its form."""
    req = urllib.request.Request(base + "/swarm", data=urllib.parse.urlencode(form).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def test_form_start_uses_typed_options_and_reports(
    fault_server: str, quickstart_short_settle: Path, tmp_path: Path, free_port: int, wait_http: Callable[[str], None]
) -> None:
    port = free_port
    log_path = tmp_path / "ui.log"
    proc = _launch(
        log_path,
        str(quickstart_short_settle),
        "--host",
        fault_server,
        "--web-port",
        str(port),
        "--out",
        str(tmp_path / "runs"),
        "--levels",
        "0,1",
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/")
        form = {
            "levels": " 0, 2",
            "canaries_per_level": "2",
            "labels": "from=ui",
            "scenario": str(quickstart_short_settle),
        }
        assert _post_form(base, form)["success"] is True
        deadline = time.monotonic() + 60
        while not list((tmp_path / "runs").glob("*/report.json")):
            assert time.monotonic() < deadline, "no report from the UI-started run"
            assert proc.poll() is None
            time.sleep(0.2)
        (run_dir,) = [p.parent for p in (tmp_path / "runs").glob("*/report.json")]
        manifest = read_manifest(run_dir)
        assert manifest.levels == [0, 2] and manifest.canaries_per_level == 2
        assert manifest.labels == {"from": "ui"} and manifest.status == "finished"
        rows = read_jsonl(run_dir / "canaries.jsonl").rows
        assert len(rows) == 1 + 4 + 2 * 2
        _check_live_chart(base)
    finally:
        code = stop(proc, log_path, tmp_path / "runs" / LOG_NAME, timeout=30)
    assert code == 0, log_path.read_text()[-2000:]


def _check_live_chart(base: str) -> None:
    """The tab's charts: the page loads their script, the charts hold a point per canary and level, and
    another page's script may not read them."""
    with urllib.request.urlopen(base + "/", timeout=10) as resp:
        assert '<script src="/loadgen/live-chart.js" defer></script></body>' in resp.read().decode()
    with urllib.request.urlopen(base + "/loadgen/live-chart.js", timeout=10) as resp:
        assert resp.headers.get_content_type() == "text/javascript" and b"/loadgen/live-chart" in resp.read()
    with urllib.request.urlopen(base + "/loadgen/live-chart", timeout=10) as resp:
        assert resp.headers["Cache-Control"] == "no-store"
        fragment = resp.read().decode()
    assert 'data-levels="0 2"' in fragment and 'data-canaries="story"' in fragment
    charts = ["<svg" + part.split("</svg>")[0] + "</svg>" for part in fragment.split("<svg")[1:]]
    assert len(charts) == 3
    unique = ET.fromstring(charts[0])
    assert [t.text for t in unique.iter("title")] == ["story, concurrency 0: 1", "story, concurrency 2: 1"]
    foreign = urllib.request.Request(base + "/loadgen/live-chart", headers={"Origin": "http://evil.example"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(foreign, timeout=10)
    assert refused.value.code == 403


def test_a_start_with_a_bad_value_is_refused_in_the_page_and_said_once_on_the_terminal(
    fault_server: str, tmp_path: Path, free_port: int, wait_http: Callable[[str], None]
) -> None:
    """``--levels 0,abc`` typed in the form: the start's answer says why (Locust's page shows it beside the form),
    no run starts, and the terminal says it once, not "web UI: web UI: ...". Before, the start went, the shape
    failed on the levels, and the page showed an empty stopped run."""
    log_path = tmp_path / "ui.log"
    proc = _launch(log_path, "--host", fault_server, "--web-port", str(free_port), "--out", str(tmp_path / "runs"))
    try:
        base = f"http://127.0.0.1:{free_port}"
        wait_http(base + "/")
        form = {"levels": "0,abc", "canaries_per_level": "1", "scenario": "quickstart"}
        assert _post_form(base, form) == {
            "success": False,
            "message": "--levels: expected comma-separated non-negative integers, got '0,abc'",
        }
        time.sleep(1.0)  # the terminal follows Locust's log every 0.25 s
        with urllib.request.urlopen(base + "/stats/requests", timeout=10) as resp:
            assert json.loads(resp.read())["state"] == "ready"  # never started
    finally:
        code = stop(proc, log_path, tmp_path / "runs" / LOG_NAME, sig=signal.SIGINT, timeout=30)
    assert code == 0, log_path.read_text()[-2000:]  # no run was interrupted
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [LOG_NAME]
    said = [line for line in log_path.read_text().splitlines() if "0,abc" in line]
    assert said == [
        "web UI: POST /swarm refused: --levels: expected comma-separated non-negative integers, got '0,abc'"
    ]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_while_a_level_is_being_reached_is_prompt_and_keeps_the_run(
    signum: signal.Signals, fault_server: str, tmp_path: Path, free_port: int, wait_http: Callable[[str], None]
) -> None:
    """Ctrl-C (SIGINT) or SIGTERM while level 2 is being reached (under ``/tokenless`` the background is answered
    at once with no token, so no slot is ever seen started, the level is never held and the canary user waits for
    its ticket): no level-2 canary is sent, every user stops at once rather than after Locust's stop timeout
    (30 s), and the run folder is ended as interrupted, with its records and reports; the session exits 1, as a
    headless run interrupted does (it exited 0). Against a server whose background answers had tokens, level 2
    was sometimes held within seconds and the run simply finished."""
    log_path = tmp_path / "ui.log"
    host = fault_server + "/tokenless"
    proc = _launch(log_path, "--host", host, "--web-port", str(free_port), "--out", str(tmp_path / "runs"))
    try:
        base = f"http://127.0.0.1:{free_port}"
        wait_http(base + "/")
        form = {"levels": "0,2", "canaries_per_level": "3", "scenario": "quickstart"}
        assert _post_form(base, form)["success"] is True
        deadline = time.monotonic() + 60
        # level 0 done and level 2's two background users running beside the canary user: its first canary
        # now waits for them to be held
        while not (_levels_done(tmp_path / "runs", {0}) and _users(base) >= 3):
            assert time.monotonic() < deadline and proc.poll() is None, "level 2 was never being reached"
            time.sleep(0.1)
        stopped = time.monotonic()
    finally:
        code = stop(proc, log_path, tmp_path / "runs" / LOG_NAME, sig=signum)
    took = time.monotonic() - stopped
    assert code == 1, log_path.read_text()[-2000:]  # interrupted, as headless
    assert took < 15, f"stop took {took:.1f} s: a user waited out the stop timeout\n" + log_path.read_text()[-3000:]
    (run_dir,) = [p.parent for p in (tmp_path / "runs").glob("*/manifest.json")]
    assert read_manifest(run_dir).status == "interrupted"
    assert (run_dir / "report.json").exists()
    levels = [row.get("level") for row in read_jsonl(run_dir / "canaries.jsonl").rows]
    assert 2 not in levels  # the waiting canary was never sent


def _users(base: str) -> int:
    """How many users Locust runs now, as its UI says."""
    with urllib.request.urlopen(base + "/stats/requests", timeout=10) as resp:
        return int(json.loads(resp.read())["user_count"])


def _levels_done(runs: Path, levels: set[int]) -> bool:
    """Whether some run folder holds all 3 canaries of each of ``levels`` (the sweep's, not the reference)."""
    for path in runs.glob("*/canaries.jsonl"):
        rows = read_jsonl(path).rows
        if all(sum(r.get("level") == lv and r.get("phase") == "sweep" for r in rows) >= 3 for lv in levels):
            return True
    return False


def test_a_second_start_gets_a_run_of_its_own(
    fault_server: str, quickstart_short_settle: Path, tmp_path: Path, free_port: int, wait_http: Callable[[str], None]
) -> None:
    """Two starts from one web UI, one after the other, in one Locust process: the second run's folder,
    counts, records, live table and report are its own; of the first, the UI shows only its report and
    table until the second start. ``--out`` is relative, as its default is: the report is served all the same."""
    runs = tmp_path / "runs"
    log_path = tmp_path / "ui.log"
    quick = str(quickstart_short_settle)
    proc = _launch(log_path, quick, "--host", fault_server, "--web-port", str(free_port), "--out", "runs", cwd=tmp_path)
    try:
        base = f"http://127.0.0.1:{free_port}"
        wait_http(base + "/")
        form = {"scenario": quick, "levels": "0,1", "canaries_per_level": "2", "labels": "run=1"}
        first = _start_and_wait(base, runs, proc, form)
        assert _served_report(base) == (first / "report.html").read_bytes()
        assert {row["level"] for row in _live_table(base)} == {"baseline", "0", "1"}
        form = {"scenario": quick, "levels": "0,2", "canaries_per_level": "1", "labels": "run=2"}
        second = _start_and_wait(base, runs, proc, form)
        assert second != first
        assert _served_report(base) == (second / "report.html").read_bytes()
        table = _live_table(base)
    finally:
        code = stop(proc, log_path, runs / LOG_NAME, timeout=30)
    assert code == 0, log_path.read_text()[-2000:]
    manifest = read_manifest(second)
    rows = read_jsonl(second / "canaries.jsonl").rows
    assert manifest.labels == {"run": "2"} and manifest.status == "finished"
    assert manifest.canaries_reported == len(rows) and manifest.canary_errors == 0
    assert {row["run_id"] for row in rows} == {second.name}
    assert {row["level"] for row in rows if row["phase"] == "sweep"} == {0, 2}
    assert {row["level"] for row in table} == {"baseline", "0", "2"}
    assert sum(row["canaries"] for row in table) == len(rows) - sum(row["phase"] == "warmup" for row in rows)
    (process_file,) = second.glob("process-*.json")
    assert json.loads(process_file.read_text())["canaries_written"] == len(rows)
    assert read_manifest(first).canaries_reported == len(read_jsonl(first / "canaries.jsonl").rows)


def _start_and_wait(base: str, runs: Path, proc: subprocess.Popen[bytes], form: dict[str, str]) -> Path:
    """Start a run from the UI's form and wait for its report; the new run folder."""
    before = {p.parent for p in runs.glob("*/report.html")}
    assert _post_form(base, form)["success"] is True
    deadline = time.monotonic() + 60
    while not (new := {p.parent for p in runs.glob("*/report.html")} - before):  # written last
        assert time.monotonic() < deadline and proc.poll() is None, "no report from the UI-started run"
        time.sleep(0.2)
    (run_dir,) = new
    return run_dir


def _served_report(base: str) -> bytes:
    with urllib.request.urlopen(base + "/loadgen/report", timeout=10) as resp:
        body: bytes = resp.read()
    return body


def _live_table(base: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(base + "/stats/requests", timeout=10) as resp:
        stats = json.loads(resp.read())
    (tab,) = stats["extended_stats"]
    rows: list[dict[str, Any]] = tab["data"]
    return rows


def test_the_table_gains_the_reports_per_level_cells(
    engine_url: str, tmp_path: Path, free_port: int, wait_http: Callable[[str], None]
) -> None:
    """The tab's table has the report's per-level columns: rate (95% CI) as report.md writes it while the run
    goes, held at send from the records (the last canary's background slots, of the level, as progress shows
    it), and once the report is written its drift max, bitwise equal, others and held throughout, the very
    cells of report.md's per-level table."""
    runs = tmp_path / "runs"
    log_path = tmp_path / "ui.log"
    proc = _launch(log_path, "--host", engine_url, "--web-port", str(free_port), "--out", str(runs))
    try:
        base = f"http://127.0.0.1:{free_port}"
        wait_http(base + "/")
        with urllib.request.urlopen(base + "/", timeout=10) as resp:
            page = resp.read().decode()
        for title in ("Rate (95% CI)", "Drift max", "Bitwise equal", "Others min/med/max", "Held at send"):
            assert title in page  # the table's structure, in the page's template arguments
        assert "Held throughout" in page
        form = {"scenario": "quickstart", "levels": "0,2", "canaries_per_level": "3"}
        run_dir = _start_and_wait(base, runs, proc, form)
        deadline = time.monotonic() + 30
        while any(row["held_throughout"] == "at the end" for row in _live_table(base)):
            assert time.monotonic() < deadline, "the report's cells never reached the table"
            time.sleep(0.2)
        table = _live_table(base)
    finally:
        code = stop(proc, log_path, runs / LOG_NAME, timeout=30)
    assert code == 0, log_path.read_text()[-2000:]
    report_rows = _report_md_levels(run_dir / "report.md")
    records = [r for r in read_jsonl(run_dir / "canaries.jsonl").rows if r["phase"] == "sweep"]
    sweep = [row for row in table if row["level"] != "baseline"]
    assert [row["level"] for row in sweep] == ["0", "2"] and set(report_rows) == {"0", "2"}
    for row in sweep:
        md = report_rows[str(row["level"])]
        assert [str(row[k]) for k in ("canaries", "errors", "unique", "diverged")] == md[1:5]
        assert [row[k] for k in ("rate", "drift_max", "bitwise", "others", "held_throughout")] == [
            md[5],
            *md[7:11],
        ]
    assert "/" in report_rows["2"][10]  # measured: the embedded engine says its batch sizes
    last = [r for r in records if r["level"] == 2][-1]
    assert sweep[1]["held_at_send"] == f"{last['background_held_at_send']}/2"
    assert sweep[0]["held_at_send"] == "—"  # level 0 holds nothing


def _report_md_levels(path: Path) -> dict[str, list[str]]:
    """report.md's per-level table of its one canary: concurrency -> the row's cells."""
    lines = path.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("| concurrency | canaries |"))
    out = {}
    for line in lines[at + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        out[cells[0]] = cells
    return out
