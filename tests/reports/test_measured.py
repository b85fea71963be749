"""``reports.analysis.measured.measured_records``: each canary record's measured co-residency and divergence, by the
report's own rules: the counts it gives per level and per measured group are those ``report.json`` writes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd  # type: ignore[import-untyped]

from collectors.read.runfolder import load_run
from reports.analysis.build import build_report
from reports.analysis.measured import COLUMNS, measured_records
from tests.reports.runkit import rec, write_run

REF = [1, 2, 3, 4]
OTHER = [1, 2, 9, 4]


def folder(tmp_path: Path) -> Path:
    records = [
        rec(REF, phase="warmup", canary="a"),
        rec(REF, phase="baseline", canary="a"),
        rec(REF, phase="baseline", canary="a"),
        rec(REF, level=2, canary="a", engine_batch_sizes=[3, 3, 4]),  # 2 others, 3 for a step
        rec(OTHER, level=2, canary="a", engine_batch_sizes=[4, 4, 4]),  # measured 3: an overshoot
        rec(None, level=2, canary="a", status="error", error_kind="timeout"),
        rec(OTHER, level=4, canary="a", engine_batch_sizes=[5, 5, 6]),
        rec(REF, level=4, canary="a"),  # nothing measured it: no batch sizes, no samples, no background file
        rec([7, 7], level=2, canary="b", engine_batch_sizes=[3, 3]),  # no baseline: the modal reference
        rec([7, 7], level=2, canary="b", engine_batch_sizes=[3, 3]),
        rec([7, 8], level=4, canary="b", engine_batch_sizes=[5, 5]),
    ]
    return write_run(tmp_path / "run", records, levels=[2, 4])


def test_rows_columns_and_values(tmp_path: Path) -> None:
    df = measured_records(folder(tmp_path))
    assert tuple(df.columns) == COLUMNS and len(df) == 11
    a = df[df["canary_id"] == "a"].reset_index(drop=True)
    assert a["phase"].tolist() == ["warmup", "baseline", "baseline", "sweep", "sweep", "sweep", "sweep", "sweep"]
    assert a["diverged"].tolist() == [pd.NA, False, False, False, True, pd.NA, True, False]  # warm-up, error: NA
    assert a["others_min"].tolist()[3:5] == [2.0, 3.0] and a["others_max"].tolist()[3:5] == [3.0, 3.0]
    assert a["measured_level"].tolist()[3:] == [2, 3, pd.NA, 4, pd.NA]
    assert a["others_source"].tolist()[3:] == [
        "engine_batch_sizes",
        "engine_batch_sizes",
        pd.NA,
        "engine_batch_sizes",
        pd.NA,
    ]
    b = df[df["canary_id"] == "b"]
    assert b["diverged"].tolist() == [False, False, True]  # against the modal completion of its sweep


def test_the_counts_are_the_reports(tmp_path: Path) -> None:
    run_dir = folder(tmp_path)
    df = measured_records(run_dir)
    report = build_report(load_run(run_dir))
    for canary in report["canaries"]:
        mine = df[(df["canary_id"] == canary["id"]) & (df["phase"] == "sweep")]
        for level in canary["levels"]:
            at = mine[mine["level"] == level["concurrency"]]
            assert int(at["diverged"].sum()) == level["diverged"]
        groups = {g["others"]: g["diverged"] for g in canary["by_co_residency"] or []}
        measured = mine[mine["measured_level"].notna()]
        assert groups == {int(k): int(v) for k, v in measured.groupby("measured_level")["diverged"].sum().items()}
