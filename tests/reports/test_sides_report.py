"""A prefill/decode run folder written by hand, reported: per-side co-residency in report.json (conforming to the
model), report.md, report.html and the terminal; and a run through a router without servers says the x-axis is
unmeasured, why, and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from collectors.read.runfolder import load_run
from loadgen.cli.progress.summary import summary_lines
from reports.analysis.build import build_report
from reports.model.report import Report
from reports.render.html import render_html
from reports.render.md import render_markdown
from tests.reports.runkit import rec, write_run
from tests.reports.test_model import conforms

T0 = 1_700_000_000.0
SERVERS = [
    {"name": "p", "role": "prefill", "base_url": "http://127.0.0.1:8101", "metrics_url": None},
    {"name": "d", "role": "decode", "base_url": "http://127.0.0.1:8102", "metrics_url": None},
]
REF, OTHER = [1, 2, 3, 4], [1, 2, 9, 9]


def pd_run(tmp_path: Path) -> Path:
    """Baseline and level 0 alone; at level 4 the prefill server runs 5 requests through every canary's prefill
    window while the decode server runs the canary alone, and every level-4 canary diverges."""
    records, prefill, decode = [], [], []
    for i in range(10):
        phase, level = ("baseline", 0) if i < 2 else ("sweep", 0 if i < 6 else 4)
        sent = T0 + 10 * i
        ids = OTHER if level == 4 else REF
        records.append(rec(ids, phase=phase, level=level, sent_at=sent, ttft_s=0.4, latency_s=2.0, stream=True))
        for k in range(4):  # prefill samples inside [sent, sent + 0.4], decode samples inside [sent + 0.4, sent + 1.95]
            prefill.append({"t": sent + 0.05 + 0.1 * k, "running": 5.0 if level == 4 else 1.0})
            decode.append({"t": sent + 0.6 + 0.3 * k, "running": 1.0})  # the decoder quiet: the canary alone
    records.append(rec(REF, level=4, sent_at=T0 + 200, stream=False))  # not streamed: its prefill window unknown
    records.append(
        rec(
            None,
            level=4,
            status="error",
            error_kind="http_status",
            sent_at=T0 + 210,
            error_message="Transparent "
            "proxy request failed: Network error: Prefill request to http://127.0.0.1:8101 failed: Connection refused",
        )
    )
    scraped = {"available": True, "interval_s": 0.05, "samples": 40, "write_failures": 0}
    return write_run(
        tmp_path / "pd",
        records,
        levels=[0, 4],
        scenario={"name": "pd", "endpoint": {"servers": SERVERS}, "background": {"side": "prefill"}},
        servers=[{**s, "file": f"engine_metrics-{s['name']}.jsonl", "engine_metrics": scraped} for s in SERVERS],
        extra={"engine_metrics-p.jsonl": prefill, "engine_metrics-d.jsonl": decode},
    )


def test_a_prefill_decode_report_measures_each_side_and_says_which_one_the_divergence_follows(tmp_path: Path) -> None:
    report = build_report(load_run(pd_run(tmp_path)))
    assert conforms(report, Report, "report") == []
    level4 = report["levels"][1]
    assert level4["co_residency_sides"]["prefill"]["median"] == 4  # 5 running, less the canary itself
    assert level4["co_residency_sides"]["decode"]["median"] == 0
    assert level4["co_residency"]["median"] == 4  # the loaded side's, and held against it
    assert level4["co_residency"]["held"] == 4 and level4["co_residency_sides"]["decode"]["held"] == 4
    sides = report["canaries"][0]["sides"]
    assert sides["loaded"] == "prefill" and sides["prefill_window_unknown"] == 2
    assert [g["others"] for g in sides["prefill"] or []] == [0, 4]
    assert sides["heatmap"] is not None and sides["heatmap"]["diverged"] == [[0], [4]]
    follows = sides["follows"]
    assert follows is not None and follows["outcome"] == "prefill", follows
    run = report["run"]
    assert [s["name"] for s in run.get("servers", [])] == ["p", "d"] and run.get("x_axis_unmeasured") is None
    notices = " ".join(run["notices"])
    assert "2 sweep canaries have no first token" in notices
    assert "1 canary error came from server 'p' (prefill) at http://127.0.0.1:8101" in notices
    md = render_markdown(report)
    assert "| p 0/0/0 · d 0/0/0 |" in md and "| p 4/4/4 · d 0/0/0 |" in md
    assert "Divergence by prefill-side load" in md and "Divergence by decode-side load" in md
    assert follows["sentence"] in md and "| prefill \\ decode | 0 |" in md
    html = render_html(report)
    assert "Prefill and decode sides" in html and "Divergence rate by prefill-side and decode-side others" in html
    assert "p 4/4/4 · d 0/0/0" in html
    assert follows["sentence"] in summary_lines(report)


def test_a_router_without_servers_says_the_x_axis_is_unmeasured_and_how_to_fix_it(tmp_path: Path) -> None:
    notice = "http://127.0.0.1:8000/metrics: no Prometheus /metrics (HTTP 405 Method Not Allowed)"
    records = [rec(REF, phase="baseline"), rec(REF), rec(REF, level=2)]
    summary: dict[str, Any] = {"url": "http://127.0.0.1:8000/metrics", "available": False, "notice": notice}
    report = build_report(load_run(write_run(tmp_path / "r", records, engine_metrics=summary, notices=[notice])))
    said = report["run"].get("x_axis_unmeasured")
    assert said is not None and said.startswith("The x-axis is unmeasured: no /metrics sample")
    assert notice in said and "does not expose its engines' /metrics" in said and "[[endpoint.servers]]" in said
    md = render_markdown(report)
    assert (
        said in report["run"]["notices"] and "The x-axis is unmeasured" in md and "\\[\\[endpoint.servers\\]\\]" in md
    )
    assert f"Notice: {said}" in summary_lines(report)
    assert "sides" not in report["canaries"][0] and "co_residency_sides" not in report["levels"][0]
    quiet = build_report(load_run(write_run(tmp_path / "q", records)))  # no endpoint was watched: nothing said
    assert "x_axis_unmeasured" not in quiet["run"]
