"""The level's band in the report: the client's own count as the witness, off-level canaries named and placed by
what they measured, levels whose load was not there without a verdict, and the gate failing them.

Run folders written by hand in the collectors' layout (``runkit``), so each case says exactly what the client
had in flight; the gate through the CLI (``loadgen check``, in this process). docs/design.md, "The level's band".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from collectors.read.runfolder import load_run
from reports.analysis.build import build_report
from reports.render.html import render_html
from reports.render.md import render_markdown
from tests.loadgen.cli.clikit import loadgen
from tests.reports.runkit import rec, write_run

T0 = 1_700_000_000.0
REF = [1, 2, 3]


def background(level: int, sent_at: float, latency_s: float, **over: Any) -> dict[str, Any]:
    row = {
        "level": level,
        "phase": "sweep",
        "sent_at": sent_at,
        "latency_s": latency_s,
        "ttft_s": None,
        "status": "ok",
        "error_kind": None,
        "error_message": None,
        "http_status": 200,
        "shared_prefix": False,
        "prompt_tokens": 8,
        "completion_tokens": 16,
    }
    return {**row, **over}


def held_by(level: int, busy: int, starts: list[float], span: float = 1.0) -> list[dict[str, Any]]:
    """``busy`` background requests in flight around each canary sent at ``starts`` (each lives ``span`` s)."""
    return [background(level, t - 0.1, span + 0.2) for t in starts for _ in range(busy)]


def canaries(level: int, starts: list[float], ids: list[int] = REF) -> list[dict[str, Any]]:
    return [rec(ids, level=level, sent_at=t, latency_s=1.0) for t in starts]


def build(tmp_path: Path, records: list[dict[str, Any]], bg: list[dict[str, Any]], **over: Any) -> Any:
    run_dir = write_run(tmp_path / "run", records, extra={"background.jsonl": bg}, **over)
    return run_dir, build_report(load_run(run_dir))


def test_twice_the_level_is_measured_by_the_client_named_placed_and_gated(tmp_path: Path) -> None:
    """No /metrics: the client's count is the witness; canaries at "level 3" that shared 6 are not at their level."""
    base = [T0 + i for i in range(2)]
    at_3 = [T0 + 10 + 2 * i for i in range(4)]
    records = [rec(REF, phase="baseline", sent_at=t, latency_s=1.0) for t in base] + canaries(3, at_3)
    no_metrics = {"url": "http://127.0.0.1:1/metrics", "available": False, "notice": "no /metrics (HTTP 404)"}
    run_dir, report = build(tmp_path, records, held_by(3, 6, at_3), levels=[3], engine_metrics=no_metrics)
    [level] = report["levels"]
    co = level["co_residency"]
    assert (co["source"], co["min"], co["median"], co["max"]) == ("client", 6, 6.0, 6)
    assert (co["band"], co["at_level"], co["not_at_level"]) == ([3, 4], 0, 4)
    assert co["client"] == {"min": 6, "median": 6.0, "max": 6} and co["client_vs_engine"] is None
    assert level["not_measured"] == (
        "4 of 4 canaries were measured (client) outside the level's band of 3-4 other requests (median 6.0)"
    )
    # placed by what was measured, never by the label
    assert [(g["others"], g["canaries"]) for g in report["canaries"][0]["by_co_residency"]] == [(6, 4)]
    [named] = [n for n in report["run"]["notices"] if "not at their level" in n]
    first = records[2]["request_id"]
    assert f"level 3: 4 outside 3-4 ({first} (client 6)" in named
    assert report["run"]["witness"]["source"] == "client"
    [unmeasured] = [n for n in report["run"]["notices"] if n.startswith("The x-axis is unmeasured")]
    assert "The client's own count of its requests in flight stands in for 4 canaries" in unmeasured
    # the verdict never reads invariant, and the gate fails unless told otherwise
    assert report["verdict"].endswith("; level 3 not measured (the load was not there)")
    assert 'data-outcome="not measured"' in render_html(report)
    assert "Level 3 not measured: 4 of 4 canaries were measured (client)" in render_markdown(report)
    (run_dir / "report.json").write_text(json.dumps(report))
    gate = loadgen("check", str(run_dir), "--max-unique", "1")
    assert gate.returncode == 1 and "FAIL  c0: every planned level measured at its level: evidence" in gate.stdout
    allowed = loadgen("check", str(run_dir), "--max-unique", "1", "--allow-unmeasured-levels")
    assert allowed.returncode == 0, allowed.stdout


def test_a_level_held_by_the_client_is_at_level_and_compared_with_the_engine(tmp_path: Path) -> None:
    """Both witnesses: the engine's gauge decides; the report says how far the client's count was from it."""
    at_2 = [T0 + 10 + 2 * i for i in range(3)]
    engine = [{"t": t + 0.5, "engine": "vllm", "running": 3.0} for t in at_2]  # 2 others and the canary
    records = canaries(2, at_2)
    _, report = build(tmp_path, records, held_by(2, 3, at_2), levels=[2])
    # no engine file yet: the client alone
    assert report["levels"][0]["co_residency"]["source"] == "client"
    run_dir = tmp_path / "run"
    (run_dir / "engine_metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in engine))
    report = build_report(load_run(run_dir))
    co = report["levels"][0]["co_residency"]
    assert (co["source"], co["median"], co["at_level"]) == ("metrics", 2.0, 3)
    assert co["client"] is not None
    assert co["client"]["median"] == 3.0  # the client had one more out: it counts what the engine queues too
    assert co["client_vs_engine"] == {"canaries": 3, "median_difference": 1.0, "max_abs_difference": 1.0}
    assert report["levels"][0]["not_measured"] is None


def test_canaries_alone_beside_a_refused_background_give_no_verdict(tmp_path: Path) -> None:
    """Every background request refused at once: the canaries ran alone, their level is not measured, and the
    first failure's reason is said before any figure."""
    at_4 = [T0 + 10 + 2 * i for i in range(3)]
    refused = [
        background(4, t + 0.01 * k, 0.002, status="error", error_kind="http_status", http_status=400, error_message=m)
        for t in at_4
        for k in range(40)
        for m in ["HTTP 400: This model's maximum context length is 512 tokens.\nHowever, you requested 900."]
    ]
    _, report = build(tmp_path, canaries(4, at_4), refused, levels=[4])
    [level] = report["levels"]
    assert level["co_residency"]["median"] == 0 and level["co_residency"]["not_at_level"] == 3
    assert level["not_measured"].startswith("120 of 120 background requests failed; 3 of 3 canaries were measured")
    head = report["health"]["headline"]
    assert head[0] == (
        "Background failed: 120 of 120 background requests failed (http_status ×120); the first: HTTP 400: This "
        "model's maximum context length is 512 tokens. However, you requested 900."
    )
    assert head[1].startswith("Level 4 not measured:")
    assert report["health"]["background"]["share"] == 1.0


def test_a_few_background_failures_are_a_notice_not_a_lost_level(tmp_path: Path) -> None:
    at_1 = [T0 + 10 + 2 * i for i in range(3)]
    bg = [*held_by(1, 1, at_1), background(1, T0 + 30, 0.01, status="error", error_kind="timeout", http_status=None)]
    _, report = build(tmp_path, canaries(1, at_1), bg, levels=[1])
    assert report["levels"][0]["not_measured"] is None and report["health"]["headline"] == []
    assert "1 of 4 background requests failed; the first: timeout." in report["health"]["notices"]
