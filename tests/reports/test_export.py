"""Exports: Parquet keeps token sequences as lists; CSV holds them as JSON text; missing stays missing."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow.parquet as pq

from collectors.read.runfolder import load_run
from reports.render.export import export_records
from tests.reports.runkit import rec, write_run


def test_parquet_and_csv(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run", [rec([1, 2, 3], level=1), rec(None, level=2, status="error")])
    parquet, csv_path = export_records(load_run(run_dir).canaries, tmp_path / "out")
    table = pq.read_table(parquet).to_pylist()
    assert table[0]["token_ids"] == [1, 2, 3] and table[0]["tokens"] == ["t1", "t2", "t3"]
    assert table[0]["logprobs"] == [-0.5, -0.5, -0.5] and table[0]["level"] == 1
    assert table[1]["token_ids"] is None and table[1]["status"] == "error"
    with open(csv_path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert json.loads(rows[0]["token_ids"]) == [1, 2, 3] and rows[1]["token_ids"] == ""
    assert rows[0]["canary_id"] == "c0"


def test_level_fields_export_with_missing_as_null(tmp_path: Path) -> None:
    records = [rec([1], level=2, burst=True, held_at_send=False, background_held_at_send=1), rec([1], level=2)]
    parquet, _ = export_records(load_run(write_run(tmp_path / "run", records)).canaries, tmp_path / "out")
    table = pq.read_table(parquet).to_pylist()
    assert [(r["burst"], r["held_at_send"], r["background_held_at_send"]) for r in table] == [
        (True, False, 1.0),
        (False, None, None),  # without them: not a burst copy (the default), the checks unknown, never 0
    ]
