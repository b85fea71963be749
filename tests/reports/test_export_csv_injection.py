"""``loadgen export``: a text cell a spreadsheet would run as a formula gets a leading ``'`` in the CSV;
numbers stay numbers, and the Parquet file keeps every value as the endpoint sent it."""

from __future__ import annotations

import csv
from pathlib import Path

import pyarrow.parquet as pq
from hypothesis import given
from hypothesis import strategies as st

from reports.render.export import FORMULA_START, neutralise
from tests.loadgen.cli.clikit import loadgen
from tests.reports.runkit import rec, write_run

FORMULAS = ['=HYPERLINK("http://evil.example","x")', "+1+1", "-2+3", "@SUM(A1)", "\tcmd", "\rcmd"]


def test_formulas_are_neutralised_in_the_csv_only(tmp_path: Path) -> None:
    records = [rec([1, 2], phase="baseline", text="plain")]
    records += [rec([1, 2], level=1, text=f, latency_s=-0.5) for f in FORMULAS]
    records.append(rec(None, level=1, status="error", error_kind="=cmd|' /C calc'!A0"))
    run_dir = write_run(tmp_path / "run", records)
    done = loadgen("export", str(run_dir), "--out", str(tmp_path / "exp"))
    assert done.returncode == 0, done.stderr
    with (tmp_path / "exp" / "canaries.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    texts = [r["text"] for r in rows]
    assert texts[0] == "plain" and texts[1 : 1 + len(FORMULAS)] == ["'" + f for f in FORMULAS]
    assert all(r["latency_s"] == "-0.5" for r in rows[1 : 1 + len(FORMULAS)])  # a number, not text: unchanged
    table = pq.read_table(tmp_path / "exp" / "canaries.parquet")
    text_columns = [f.name for f in table.schema if f.type == "string"]
    assert "text" in text_columns and all(not r[c].startswith(FORMULA_START) for r in rows for c in text_columns)
    parquet = table.to_pydict()
    assert parquet["text"][1 : 1 + len(FORMULAS)] == FORMULAS  # raw in Parquet
    assert parquet["latency_s"][1] == -0.5


@given(st.text(max_size=20))
def test_neutralise_only_prefixes_formula_starts(cell: str) -> None:
    out = neutralise(cell)
    assert out is not None and not out.startswith(FORMULA_START)
    assert out == ("'" + cell if cell.startswith(FORMULA_START) else cell)
