"""Exports: Parquet keeps token sequences as lists; CSV holds them as JSON text; missing stays missing."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from collectors.read.runfolder import load_run
from reports.render.export import export_records
from tests.loadgen.cli import clikit
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


@pytest.mark.e2e
def test_status_codes_export_as_whole_numbers_through_the_cli(tmp_path: Path) -> None:
    """``loadgen export`` (a real process): an HTTP status is ``400`` in both files, never ``400.0``, and empty
    where a record has none (the reader holds the column as floats beside them)."""
    records = [rec([1, 2], level=0), rec(None, level=0, status="error", error_kind="http_status", http_status=400)]
    run_dir = write_run(tmp_path / "run", records)
    done = clikit.loadgen_process("export", str(run_dir), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    table = pq.read_table(tmp_path / "out" / "canaries.parquet")
    assert str(table.schema.field("http_status").type) == "int64"
    assert table.column("http_status").to_pylist() == [None, 400]
    with open(tmp_path / "out" / "canaries.csv", newline="") as fh:
        assert [r["http_status"] for r in csv.DictReader(fh)] == ["", "400"]
