"""Cost beside determinism (``reports.analysis.cost``): background throughput per level, batch invariance read from
the server or a label, and ``compare``'s cost rows and frontier chart."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from collectors.read.runfolder import load_run
from reports.analysis import cost
from reports.analysis.build import build_report
from reports.compare.runs import compare_reports, render_html, render_markdown
from reports.model.report import BackgroundLevel, Report
from tests.reports.runkit import partial_report, rec, write_run


def test_throughput_is_tokens_over_the_level_span() -> None:
    sent = np.array([10.0, 11.0, 12.0, math.nan])
    latency = np.array([2.0, 4.0, 1.0, 1.0])  # ends 12, 15, 13: span 10 .. 15
    ok = np.array([True, True, False, True])
    tokens = np.array([30.0, 20.0, 99.0, 50.0])  # the failed one's tokens do not count
    got = cost.throughput(sent, latency, ok, tokens)
    assert got == {"wall_s": 5.0, "tokens_per_s": pytest.approx((30 + 20 + 50) / 5.0)}
    assert cost.throughput(np.array([1.0]), np.array([0.0]), np.array([True]), np.array([5.0]))["tokens_per_s"] is None
    assert cost.throughput(np.zeros(0), np.zeros(0), np.zeros(0, bool), np.zeros(0)) == {
        "wall_s": None,
        "tokens_per_s": None,
    }


def test_overall_throughput_sums_tokens_and_walls() -> None:
    bg: list[dict[str, Any]] = [
        {"concurrency": 1, "completion_tokens": 100.0, "wall_s": 10.0},
        {"concurrency": 4, "completion_tokens": 300.0, "wall_s": 10.0},
        {"concurrency": None, "completion_tokens": 999.0, "wall_s": 1.0},  # warm-up: no level
        {"concurrency": 8, "completion_tokens": None, "wall_s": 3.0},
    ]
    assert cost.overall_throughput(cast("list[BackgroundLevel]", bg)) == pytest.approx(20.0)  # the fields it reads
    assert cost.overall_throughput(None) is None


@pytest.mark.parametrize(
    ("server", "label", "want"),
    [(True, "0", True), (False, None, False), (None, "1", True), (None, "off", False), (None, "maybe", None)],
)
def test_batch_invariance_server_first_then_label(server: Any, label: Any, want: Any) -> None:
    labels = {} if label is None else {"batch_invariant": label}
    report = {"run": {"server_config": {"batch_invariant": server}, "labels": labels}}
    assert cost.batch_invariant(partial_report(**report)) is want


def _bg(level: int, t0: float, tokens: int) -> list[dict[str, Any]]:
    return [
        {"level": level, "sent_at": t0 + i, "latency_s": 1.0, "status": "ok", "completion_tokens": tokens}
        for i in range(3)
    ]


def _report(tmp_path: Path, name: str, label: str, diverge: bool) -> Report:
    records = [rec([1, 2, 3], phase="baseline"), rec([1, 2, 3], level=0), rec([1, 9 if diverge else 2, 3], level=4)]
    run = write_run(
        tmp_path / name,
        records,
        labels={"batch_invariant": label},
        extra={"background.jsonl": _bg(4, 100.0, 10)},
    )
    return build_report(load_run(run))


def test_compare_shows_cost_and_a_frontier_when_batch_invariance_differs(tmp_path: Path) -> None:
    a, b = _report(tmp_path, "a", "0", True), _report(tmp_path, "b", "1", False)
    assert a["background"] is not None
    assert a["background"][0]["tokens_per_s"] == pytest.approx(30 / 3.0)  # 3 requests, sent 100..102, end 103
    pair = [("default", a), ("invariant", b)]
    cmp = compare_reports(pair)
    assert cmp["frontier"] is True and [r["batch_invariant"] for r in cmp["runs"]] == [False, True]
    rows = {lv["concurrency"]: [row for row in lv["runs"] if row is not None] for lv in cmp["canaries"][0]["cost"]}
    assert all(len(runs) == 2 for runs in rows.values())
    assert rows[4][0]["background_tokens_per_s"] == pytest.approx(10.0)
    assert rows[4][0]["divergence_rate"] == 1.0 and rows[4][1]["divergence_rate"] == 0.0
    assert rows[0][0]["background_tokens_per_s"] is None  # level 0 had no background
    assert rows["overall"][0]["canary_latency_p99"] is not None
    html = render_html(cmp, pair)
    assert "Cost vs divergence (frontier)" in html and "Cost beside determinism" in html
    assert "| 4 | B | on | 10.0 |" in render_markdown(cmp)  # run B ("invariant"), named by letter
    same = compare_reports([("default", a), ("again", a)])
    assert same["frontier"] is False
    assert "Cost vs divergence" not in render_html(same, [("default", a), ("again", a)])
