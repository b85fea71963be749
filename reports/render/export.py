"""Export canary records as Parquet and CSV for notebooks and spreadsheets.

Builds an Arrow table from the run's columns (token sequences as list columns in Parquet, JSON text
in CSV, where list cells have no standard form). Request bodies and top-k alternatives stay in the
JSONL files. Writes only the two files it is asked for.

The CSV is opened by spreadsheets, which run a cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a
carriage return as a formula; completions and error messages come from the endpoint. So every text
cell of the CSV that starts so gets a leading ``'`` (OWASP's advice for CSV injection); numeric columns
stay numbers (``-0.5`` is not text) and the Parquet file keeps every value as it was.

Both files are written to a temporary file and renamed (``loadgen.core.runfiles.writing``): never through a
link a crafted run folder holds in their place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd  # type: ignore[import-untyped]
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from collectors.read.runfolder import SCALARS, CanaryColumns
from loadgen.core.errors import RunFolderError
from loadgen.core.runfiles import output_folder, writing

# every scalar the reader keeps, and which file each record came from
EXPORTED = (*SCALARS, "file")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# HTTP status codes: integers in both files (``400``, not ``400.0``), null where a record has none
STATUS_CODES = ("http_status", "cache_reset_status")


def neutralise(cell: str | None) -> str | None:
    """A CSV text cell a spreadsheet will not run: prefixed with ``'`` when it starts like a formula."""
    return "'" + cell if cell is not None and cell.startswith(FORMULA_START) else cell


def csv_safe(table: Any) -> Any:
    """``table`` with every text column's cells ``neutralise``d; other columns untouched."""
    for i, f in enumerate(table.schema):
        if pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
            cells = [neutralise(v) for v in table.column(i).to_pylist()]
            table = table.set_column(i, f.name, pa.array(cells, type=f.type))
    return table


def _list_column(mat: Any, lengths: Any, value_type: Any, values: Any = None) -> Any:
    present = lengths >= 0
    flat = mat[np.arange(mat.shape[1]) < lengths[:, None]] if values is None else values
    offsets = np.concatenate([[0], np.cumsum(np.where(present, lengths, 0))]).astype(np.int32)
    return pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(flat, type=value_type), mask=pa.array(~present, type=pa.bool_())
    )


def records_table(cols: CanaryColumns) -> Any:
    f = cols.frame
    data: dict[str, Any] = {}
    for name in EXPORTED:
        series = f[name]
        if name in STATUS_CODES:  # held as objects or floats beside the rows without one: whole numbers, or null
            values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64)
            missing = ~np.isfinite(values)
            data[name] = pa.array(np.where(missing, 0, values).astype(np.int64), mask=missing, type=pa.int64())
        elif series.dtype == object:
            data[name] = pa.array([None if v is None else str(v) for v in series.tolist()], type=pa.string())
        else:
            data[name] = pa.array(series.to_numpy(), from_pandas=True)
    n_ids, n_tok, n_lp = (f[k].to_numpy() for k in ("n_ids", "n_tokens", "n_logprobs"))
    data["token_ids"] = _list_column(cols.token_ids, n_ids, pa.int64())
    codes = cols.token_codes[np.arange(cols.token_codes.shape[1]) < n_tok[:, None]]
    data["tokens"] = _list_column(cols.token_codes, n_tok, pa.string(), cols.vocab[codes].tolist())
    data["logprobs"] = _list_column(cols.logprobs, n_lp, pa.float64())
    return pa.table(data)


def export_records(cols: CanaryColumns, out_dir: Path, stem: str = "canaries") -> list[Path]:
    """Write ``<stem>.parquet`` and ``<stem>.csv`` into ``out_dir``; returns their paths."""
    table = records_table(cols)
    parquet, csv = out_dir / f"{stem}.parquet", out_dir / f"{stem}.csv"
    flat = table
    for name in ("token_ids", "tokens", "logprobs"):
        cells = [None if v is None else orjson.dumps(v).decode() for v in table.column(name).to_pylist()]
        flat = flat.set_column(flat.schema.get_field_index(name), name, pa.array(cells, type=pa.string()))
    try:
        output_folder(out_dir)
        with writing(parquet) as fh:
            pq.write_table(table, fh)
        with writing(csv) as fh:
            pacsv.write_csv(csv_safe(flat), fh)
    except OSError as exc:
        raise RunFolderError(f"{out_dir}: cannot write exports ({exc})") from exc
    return [parquet, csv]
