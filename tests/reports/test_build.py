"""Golden run folders (hand-made, in the collectors' layout) must give their golden ``report.json``.

To refresh after an intended change: ``REGEN_GOLDEN=1 pytest tests/reports/test_build.py``, then
read the diff of ``tests/reports/golden/*.report.json`` before committing it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from collectors.read.runfolder import load_run
from reports.analysis.build import build_report
from reports.render.writer import report_json

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(p.name for p in GOLDEN.iterdir() if p.is_dir())


@pytest.mark.parametrize("name", CASES)
def test_golden_report(name: str) -> None:
    got = json.loads(report_json(build_report(load_run(GOLDEN / name))))
    expected_path = GOLDEN / f"{name}.report.json"
    if os.environ.get("REGEN_GOLDEN"):
        expected_path.write_bytes(report_json(got))
    assert got == json.loads(expected_path.read_text())


def test_single_canary_shape_and_context() -> None:
    report = build_report(load_run(GOLDEN / "single"))
    assert report["canaries"][0]["overall"] == report["overall"]  # one canary: also at top level
    assert report["input"]["skipped_lines"] == 1 and report["input"]["records"] == 20
    assert report["input"]["engine_running_joined"] is True
    # one sample in the middle of each sweep canary's life (none for s40, which has no latency), running =
    # level + 1 except s42's (level 4, running 4: one request fewer than promised); the samples every 4 s
    # fall at send times, outside the window (the canary may not be admitted yet)
    assert [lv["engine_running"] for lv in report["levels"]] == [
        {"median": 1.0},
        {"median": 2.0},
        {"median": 3.0},
        {"median": 5.0},
    ]
    expected = [(0, 0.0, 0, 4, 0, 0), (1, 1.0, 1, 4, 0, 0), (2, 2.0, 2, 4, 0, 0), (3, 4.0, 4, 2, 1, 1)]
    measured = ("source", "min", "median", "max", "held", "not_held", "unmeasured", "not_held_at_send")
    assert [{k: v for k, v in lv["co_residency"].items() if k in measured} for lv in report["levels"]] == [
        {
            "source": "metrics",
            "min": lo,
            "median": med,
            "max": hi,
            "held": held,
            "not_held": not_held,
            "unmeasured": unmeasured,
            "not_held_at_send": 0,
        }
        for lo, med, hi, held, not_held, unmeasured in expected
    ]
    gap_notice, short_notice, apart_notice, torn_notice = report["run"]["notices"]
    # the fixture's background file holds a few requests only: the client counted fewer than the engine ran
    assert apart_notice.startswith("The client's own count of its requests in flight was a median -1 from")
    assert torn_notice.startswith("Records lost: canaries.jsonl ends in a torn line (a write cut short).")
    assert gap_notice.startswith("1 canary had no engine figure although the endpoint serves /metrics")
    assert "level 4: 1 (request ids s40)" in gap_notice
    assert short_notice.startswith("1 canary shared the engine with fewer other requests than the level")
    assert "level 4: 1" in short_notice
    assert report["verdict"] == (
        "3 unique completions over 16 canaries (1 failed); earliest divergence at token 3; "
        "divergence first seen at concurrency 2; level 1 not measured (the load was not there)"
    )
    # the fixture's one background request at level 1 failed: that level's load was not there
    # (reports.analysis.level_load)
    assert report["levels"][1]["not_measured"] == "1 of 1 background requests failed"
    assert report["health"]["levels_not_measured"] == {"c0": [1]}
    assert report["health"]["headline"][0].startswith(
        "Background failed: 3 of 7 background requests failed (timeout ×3)"
    )
    fork = report["forks"][0]
    assert (fork["position"], fork["count"], fork["levels"]) == (3, 3, {"2": 1, "4": 2})
    assert fork["top1_top2_gap"] == pytest.approx(
        0.02
    )  # a small gap at the fork (7 rounding steps: structural by reports.analysis.forks)
    assert [b["requests"] for b in report["background"] or []] == [1, 2, 4]
    assert report["scenario_checks"]["temperature_zero"] is True
    lv4 = report["levels"][3]
    assert lv4["logprob_drift"] is not None
    assert lv4["logprob_drift"]["bitwise_equal_share"] == pytest.approx(2 / 3)  # one drifted by 1e-7


def test_multi_canary_shape() -> None:
    report = build_report(load_run(GOLDEN / "multi"))
    assert "overall" not in report and [c["id"] for c in report["canaries"]] == ["alpha", "zeta"]
    alpha, zeta = report["canaries"]
    assert alpha["reference"]["kind"] == "modal" and alpha["overall"]["unique_completions"] == 2
    assert alpha["forks"][0]["other_token"] == "t9" and alpha["forks"][0]["position"] == 1
    assert zeta["reference"]["identity"] == "text" and zeta["overall"]["earliest_divergence"] == 8
    assert report["run"]["labels"] == {"batch_invariant": "1", "note": "<b>x</b>"}
