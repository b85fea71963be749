"""Golden run folders (hand-made, in the collectors' layout) must give their golden ``report.json``.

To refresh after an intended change: ``REGEN_GOLDEN=1 pytest tests/reports/test_build.py``, then
read the diff of ``tests/reports/golden/*.report.json`` before committing it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from collectors.runfolder import load_run
from reports.build import build_report
from reports.writer import report_json

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
    assert [lv["engine_running"] for lv in report["levels"]] == [
        {"median": 1.5},  # sent at +5..+8 s; samples every 4 s; a tie takes the earlier sample
        {"median": 2.5},
        {"median": 3.5},
        {"median": 4.5},
    ]
    assert report["verdict"] == (
        "3 unique completions over 15 canaries (1 error); earliest divergence at token 3; "
        "divergence first seen at concurrency 2"
    )
    fork = report["forks"][0]
    assert (fork["position"], fork["count"], fork["levels"]) == (3, 3, {"2": 1, "4": 2})
    assert fork["top1_top2_gap"] == pytest.approx(0.02)  # a near-tie at the fork
    assert [b["requests"] for b in report["background"]] == [1, 2, 4]
    assert report["scenario_checks"]["temperature_zero"] is True
    lv4 = report["levels"][3]
    assert lv4["logprob_drift"]["bitwise_equal_share"] == pytest.approx(2 / 3)  # one drifted by 1e-7


def test_multi_canary_shape() -> None:
    report = build_report(load_run(GOLDEN / "multi"))
    assert "overall" not in report and [c["id"] for c in report["canaries"]] == ["alpha", "zeta"]
    alpha, zeta = report["canaries"]
    assert alpha["reference"]["kind"] == "modal" and alpha["overall"]["unique_completions"] == 2
    assert alpha["forks"][0]["other_token"] == "t9" and alpha["forks"][0]["position"] == 1
    assert zeta["reference"]["identity"] == "text" and zeta["overall"]["earliest_divergence"] == 8
    assert report["run"]["labels"] == {"batch_invariant": "1", "note": "<b>x</b>"}
