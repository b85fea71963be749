"""Measured co-residency in the report: what the engine ran while each canary was in flight, held or not.

Run folders are written by hand in the collectors' layout (``runkit``) and go through the same reader
and report builder as ``loadgen report``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.engine_metrics import nearest_running
from collectors.read.runfolder import load_run
from reports.analysis import coresidency
from reports.analysis.build import build_report
from reports.model.report import Report
from reports.render.html import render_html
from reports.render.md import render_markdown
from tests.reports.runkit import rec, write_run

REF = [1, 2, 3, 4]
T0 = 1_700_000_000.0


def samples(pairs: list[tuple[float, float]]) -> list[dict[str, Any]]:
    return [{"t": t, "engine": "vllm", "running": r, "waiting": 0.0} for t, r in pairs]


def report_of(
    tmp_path: Path, records: list[dict[str, Any]], engine: list[dict[str, Any]] | None = None, **m: Any
) -> Report:
    extra = {"engine_metrics.jsonl": engine} if engine is not None else None
    return build_report(load_run(write_run(tmp_path / "run", records, extra=extra, **m)))


def test_burst_whose_samples_arrive_after_its_send_shows_hundreds_not_zero(tmp_path: Path) -> None:
    """500 copies at once; the last scrape before them saw an idle engine and the next came 0.3 s later."""
    burst = [
        rec(REF, level=500, burst=True, sent_at=T0 + 100.0 + i * 2e-5, latency_s=3.0, inflight=499) for i in range(500)
    ]
    engine = samples([(T0 + 99.98, 0.0), *((T0 + 100.3 + 0.05 * k, 500.0) for k in range(50))])
    report = report_of(tmp_path, burst, engine)
    sent = np.array([r["sent_at"] for r in burst])
    t = np.array([e["t"] for e in engine])
    running = np.array([e["running"] for e in engine])
    assert np.nanmax(nearest_running(sent, t, running)) == 0.0  # the old join: an idle engine
    [lv] = report["levels"]
    assert lv["co_residency"] == {
        "source": "metrics",
        "min": 499,
        "median": 499.0,
        "max": 499,
        "held": 500,  # a burst copy's level counts itself: 499 others is the promise
        "not_held": 0,
        "unmeasured": 0,
        "not_held_at_send": 0,
        "band": [375, 624],  # loadgen.core.band around the 499 others a copy is promised
        "at_level": 500,
        "not_at_level": 0,
        "bound": None,  # a burst holds no background
        "client": None,  # no background file: the client's count would leave out what it never recorded
        "client_vs_engine": None,
    }
    assert lv["engine_running"] == {"median": 500.0}
    assert [(g["others"], g["canaries"]) for g in report["canaries"][0]["by_co_residency"] or []] == [(499, 500)]
    assert report["run"]["notices"] == []


def test_canary_without_samples_is_null_and_named_in_the_notice(tmp_path: Path) -> None:
    records = [
        rec(REF, level=2, sent_at=T0 + 10.0, latency_s=1.0, request_id="seen-1"),
        rec(REF, level=2, sent_at=T0 + 12.0, latency_s=1.0, request_id="seen-2"),
        rec(REF, level=2, sent_at=T0 + 14.0, latency_s=1.0, request_id="lost-1"),  # the scrape returned nothing
        rec(None, level=2, status="error", sent_at=T0 + 16.0, request_id="lost-2"),  # failed: no lifetime at all
    ]
    engine = samples([(T0 + 10.5, 3.0), (T0 + 12.5, 4.0), (T0 + 30.0, 0.0)])
    report = report_of(tmp_path, records, engine)
    co = report["levels"][0]["co_residency"]
    assert (co["min"], co["median"], co["max"]) == (2, 2.5, 3)
    assert (co["held"], co["not_held"], co["unmeasured"]) == (2, 0, 2)
    [notice] = report["run"]["notices"]
    assert notice.startswith("2 canaries had no engine figure although the endpoint serves /metrics")
    assert "level 2: 2" in notice and "lost-1, lost-2" in notice and "seen" not in notice


def test_truth_below_the_level_counts_one_not_held(tmp_path: Path) -> None:
    records = [rec(REF, level=4, engine_batch_sizes=[5, 5, 6, 5]) for _ in range(3)]
    records.append(rec(REF, level=4, engine_batch_sizes=[5, 3, 5], request_id="short"))  # 2 others, once
    engine = samples([(T0 + k * 0.1, 40.0) for k in range(300)])  # a busy gauge: the truth wins over it
    report = report_of(tmp_path, records, engine)
    co = report["levels"][0]["co_residency"]
    assert co["source"] == "engine_batch_sizes"
    assert (co["min"], co["median"], co["max"]) == (2, 4.0, 5)
    assert (co["held"], co["not_held"], co["unmeasured"]) == (3, 1, 0)
    [notice] = report["run"]["notices"]
    assert "1 canary shared the engine with fewer other requests than the level" in notice and "level 4: 1" in notice


def test_the_promise_of_a_burst_copy_counts_itself(tmp_path: Path) -> None:
    records = [
        rec(REF, level=3, burst=True, engine_batch_sizes=[3, 3]),  # 2 others: all a 3-copy burst promises
        rec(REF, level=3, engine_batch_sizes=[3, 3]),  # an ordinary level-3 canary was promised 3
        rec(REF, phase="baseline", engine_batch_sizes=[1]),  # alone, as promised: no level of its own
    ]
    report = report_of(tmp_path, records, levels=[3])
    co = report["levels"][0]["co_residency"]
    assert (co["held"], co["not_held"]) == (1, 1)


def test_load_side_check_at_send_is_counted(tmp_path: Path) -> None:
    records = [
        rec(REF, level=8, held_at_send=True, background_held_at_send=8),
        rec(REF, level=8, held_at_send=False, background_held_at_send=5),
        rec(REF, level=8, held_at_send=False, background_held_at_send=7),
        rec(REF, level=8),  # a record that predates the check
    ]
    co = report_of(tmp_path, records)["levels"][0]["co_residency"]
    assert co["not_held_at_send"] == 2
    assert (co["source"], co["min"], co["unmeasured"]) == (None, None, 4)


def test_an_old_run_folder_reports_with_nulls_never_zeros(tmp_path: Path) -> None:
    old_keys = ("burst", "held_at_send", "background_held_at_send", "engine_batch_sizes")
    records = [
        rec(REF, phase="baseline"),
        rec(REF, level=1),
        rec([1, 2, 9], level=2),
        rec(None, level=2, status="error"),
    ]
    assert not any(k in r for r in records for k in old_keys)
    report = report_of(tmp_path, records)
    for lv in report["levels"]:
        assert lv["engine_running"] is None
        assert lv["co_residency"] == {
            "source": None,
            "min": None,
            "median": None,
            "max": None,
            "held": 0,
            "not_held": 0,
            "unmeasured": lv["canaries"],
            "not_held_at_send": 0,
            "band": [lv["concurrency"], lv["concurrency"] + 1],
            "at_level": 0,
            "not_at_level": 0,
            "bound": None,
            "client": None,
            "client_vs_engine": None,
        }
    assert report["canaries"][0]["by_co_residency"] is None
    assert report["input"]["engine_running_joined"] is False and report["run"]["notices"] == []
    md = render_markdown(report)
    assert "| others min/med/max | held throughout |" in md and "| — | — |" in md and "measured co-residency" not in md
    assert "Divergence by measured co-residency" not in render_html(report)


def test_a_long_scrape_gap_is_a_notice(tmp_path: Path) -> None:
    summary = {"available": True, "interval_s": 0.05, "samples": 900, "max_gap_s": 12.04, "gaps": 2}
    records = [rec(REF, level=1, engine_batch_sizes=[2])]
    report = report_of(tmp_path, records, engine_metrics=summary)
    assert report["run"]["notices"] == [
        "The /metrics scraper went 12.0 s without a sample (2 gaps in all): canaries in flight then have no "
        "scraped engine figure."
    ]


def test_tables_show_measured_others_and_held(tmp_path: Path) -> None:
    records = [rec(REF, phase="baseline", engine_batch_sizes=[1])]
    records += [rec(REF, level=2, engine_batch_sizes=[3, 3]) for _ in range(11)]
    records.append(rec([1, 2, 7, 8], level=2, engine_batch_sizes=[3, 2]))  # diverged, and saw 1 other once
    report = report_of(tmp_path, records)
    md = render_markdown(report)
    assert "| 1/2/2 | 11/12 |" in md  # others min/med/max, held of measured
    assert "| others | canaries | unique | diverged | earliest |" in md
    assert "| 2 | 12 | 2 | 1 | 2 |" in md  # 12 canaries shared the engine with 2 others (median)
    html = render_html(report)
    assert "Divergence by measured co-residency" in html and "<td>11/12</td>" in html and "<td>1 / 2 / 2</td>" in html


# --- property: a co-residency group is summarised exactly as a level ---------------------------------

_FIGS = ("canaries", "completions", "unique_completions", "diverged", "divergence_rate", "earliest_divergence")


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.lists(st.integers(0, 3), max_size=5), st.sampled_from([0, 1, 3])), min_size=1, max_size=20)
)
def test_a_group_whose_others_equal_the_level_has_the_level_s_figures(
    tmp_path_factory: Any, spec: list[tuple[list[int], int]]
) -> None:
    records = [rec([1, 2, 3], phase="baseline", engine_batch_sizes=[1])]
    records += [rec(ids, level=lv, engine_batch_sizes=[lv + 1] * 3) for ids, lv in spec]
    report = report_of(tmp_path_factory.mktemp("p"), records)
    entry = report["canaries"][0]
    groups = {g["others"]: g for g in entry["by_co_residency"] or []}
    assert sorted(groups) == [lv["concurrency"] for lv in entry["levels"]]
    for lv in entry["levels"]:
        g: Mapping[str, object] = groups[lv["concurrency"]]
        level: Mapping[str, object] = lv
        assert {k: g[k] for k in _FIGS} == {k: level[k] for k in _FIGS}
        assert (g["min"], g["max"]) == (lv["co_residency"]["min"], lv["co_residency"]["max"])
        assert lv["co_residency"]["held"] == lv["canaries"]


def test_the_witness_says_which_record_and_how_fresh_the_gauge_was(tmp_path: Path) -> None:
    """Two canaries measured by a gauge that moved three times inside the first one's life (0.2 s and 0.4 s
    apart) and once inside the second's; a server that refreshes it every 40 steps says so."""
    records = [
        rec(REF, level=2, sent_at=T0 + 10.0, latency_s=1.0),
        rec(REF, level=2, sent_at=T0 + 20.0, latency_s=1.0),
    ]
    gauge = [(T0 + 10.05, 3.0), (T0 + 10.2, 3.0), (T0 + 10.3, 4.0), (T0 + 10.5, 3.0), (T0 + 10.9, 2.0)]
    gauge += [(T0 + 20.1, 3.0), (T0 + 20.6, 3.0), (T0 + 20.8, 4.0), (T0 + 30.0, 0.0)]
    server = {"config": {"settings": {"metrics_refresh_steps": 40}}}
    report = report_of(tmp_path, records, samples(gauge), server=server)
    witness = report["run"]["witness"]
    assert witness["source"] == "metrics" and witness["canaries"] == 2
    assert witness["gauge_changes"] == 4
    assert witness["gauge_change_median_s"] == pytest.approx(0.3)  # 0.2 and 0.4 within the first; none across
    assert witness["refresh_steps"] == 40
    assert "every 40 steps" in witness["summary"]
    assert f"Witness: {witness['summary']}." in render_markdown(report)
    assert "witness: " in render_html(report)


def test_the_witness_is_the_engines_batch_sizes_where_it_returns_them(tmp_path: Path) -> None:
    records = [rec(REF, level=1, engine_batch_sizes=[2, 2]) for _ in range(3)]
    report = report_of(tmp_path, records, samples([(T0 + k * 0.1, 2.0) for k in range(100)]))
    witness = report["run"]["witness"]
    assert witness["source"] == "engine_batch_sizes" and witness["canaries"] == 3
    assert witness["gauge_changes"] is None and "exact" in witness["summary"]


@given(st.lists(st.tuples(st.floats(0, 10), st.integers(0, 3)), max_size=40))
@settings(max_examples=60, deadline=None)
def test_gauge_changes_never_exceed_the_samples_inside_the_windows(pairs: list[tuple[float, int]]) -> None:
    t = np.array(sorted(p[0] for p in pairs), dtype=np.float64)
    v = np.array([float(p[1]) for p in pairs], dtype=np.float64)
    start, end = np.array([0.0, 5.0]), np.array([4.0, 9.0])
    changes, gap = coresidency.gauge_changes(start, end, t, v)
    pairs_inside = sum(max(int(((t >= a) & (t < b)).sum()) - 1, 0) for a, b in zip(start, end, strict=True))
    assert 0 <= changes <= pairs_inside  # a change is between two samples of one window
    assert gap is None or 0.0 <= gap <= 4.0
