"""A columns file forged beside an untouched JSONL changes nothing a report, a check or an export says.

One real run on the embedded engine (``forgekit.real_run``: ok and failed canaries, two distinct completions),
then its columns file is forged as whoever crafts a run folder would: each row consistent in itself and pointing at
the JSONL's real line, its values changed (a token, a status, a request id, one alternative's logprob, or every
record made a copy of one answer). The JSONL is the truth: ``loadgen report`` gives what the JSONL alone gives and a
notice naming the row, ``loadgen check`` fails where the JSONL diverges, ``loadgen export`` writes the JSONL's
tokens. Then columns rows that claim more than their JSONL line holds, over sparse files of gigabytes: the report is
the JSONL's, with a notice, and the reader's memory stays small. The honest folder reads from its columns file whole.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest

from collectors.jsonl import LINE_LIMIT
from collectors.read import sidecar as sidecar_read
from collectors.read.runfolder import load_run
from collectors.sidecar import INDEX, columns_dir
from loadgen.core.record import CanaryRecord
from tests.collectors.forgekit import copy_of, forge, peak_cli, real_run, records
from tests.collectors.test_fastcolumns_property import assert_same
from tests.loadgen.cli.clikit import loadgen


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return real_run(tmp_path_factory.mktemp("real") / "out")


def _first_ok(rows: list[CanaryRecord]) -> CanaryRecord:
    return next(r for r in rows if r.status == "ok" and r.tokens)


def _all_alike(rows: list[CanaryRecord]) -> list[CanaryRecord]:
    """Every record a copy of the first answer, under its own request id: no error, one completion."""
    model = _first_ok(rows)
    return [dataclasses.replace(model, request_id=r.request_id, phase=r.phase, sent_at=r.sent_at) for r in rows]


def _token(rows: list[CanaryRecord]) -> list[CanaryRecord]:
    r = _first_ok(rows)
    assert r.tokens is not None and r.token_ids is not None
    r.tokens = [" PWNED", *r.tokens[1:]]
    r.token_ids = [7777, *r.token_ids[1:]]
    return rows


def _status(rows: list[CanaryRecord]) -> list[CanaryRecord]:
    r = next(r for r in rows if r.status == "error")
    r.status, r.error_kind, r.http_status = "ok", None, 200
    return rows


def _request_id(rows: list[CanaryRecord]) -> list[CanaryRecord]:
    rows[-1].request_id = "0" * 32
    return rows


def _alternative(rows: list[CanaryRecord]) -> list[CanaryRecord]:
    r = _first_ok(rows)
    assert r.top_logprobs
    token, lp = r.top_logprobs[3][1]
    r.top_logprobs[3][1] = (token, math.nextafter(lp, 0.0))  # one ulp: the gap at position 3 moves
    return rows


FORGERIES: dict[str, Callable[[list[CanaryRecord]], list[CanaryRecord]]] = {
    "every record alike": _all_alike,
    "a token": _token,
    "a status": _status,
    "a request id": _request_id,
    "an alternative's logprob": _alternative,
}


def _forged(run_dir: Path, to: Path, forgery: Callable[[list[CanaryRecord]], list[CanaryRecord]]) -> Path:
    folder = copy_of(run_dir, to)
    rows, lines = records(folder / "canaries.jsonl")
    forge(folder / "canaries.jsonl", forgery(rows), lines)
    return folder


def _figures(report: dict[str, Any]) -> Any:
    return report["canaries"], report["overall"]


def test_an_honest_run_reads_from_its_columns_file_whole(run_dir: Path) -> None:
    path = run_dir / "canaries.jsonl"
    with contextlib.ExitStack() as stack, open(path, "rb") as jsonl:
        mapped, why = sidecar_read._prove(stack, columns_dir(path), jsonl, path, LINE_LIMIT)
    assert why is None and mapped is not None and mapped.rows == len(path.read_bytes().splitlines()) == 8
    got = load_run(run_dir, workers=1)
    assert [f.columns_notice for f in got.files] == [None]
    assert_same(got, load_run(run_dir, reference=True))


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_a_forged_columns_file_changes_nothing_the_report_says(run_dir: Path, tmp_path: Path, forgery: str) -> None:
    forged = _forged(run_dir, tmp_path / "forged", FORGERIES[forgery])
    jsonl_only = copy_of(run_dir, tmp_path / "jsonl-only", columns=False)
    for folder in (forged, jsonl_only):
        done = loadgen("report", str(folder))
        assert done.returncode == 0, done.stderr
    got, want = (json.loads((f / "report.json").read_text()) for f in (forged, jsonl_only))
    assert _figures(got) == _figures(want)
    (notice,) = [n for n in got["run"]["notices"] if n.startswith("canaries.columns:")]
    assert notice.startswith("canaries.columns: its row ") and "read from canaries.jsonl" in notice, notice
    assert "canaries.columns" in (forged / "report.md").read_text()
    read = load_run(forged, workers=1)
    assert [f.columns_notice for f in read.files] == [notice]
    read.files[0].columns_notice = None
    assert_same(read, load_run(jsonl_only, workers=1))


def test_check_fails_where_the_jsonl_diverges(run_dir: Path, tmp_path: Path) -> None:
    """The forged columns file says every canary answered alike; the JSONL holds failed canaries (the fault plan
    fails at least 3 of the 8) and, where the engine's answers moved, more than one completion."""
    forged = _forged(run_dir, tmp_path / "forged", _all_alike)
    jsonl_only = copy_of(run_dir, tmp_path / "jsonl-only", columns=False)
    gate = ("--max-unique", "1", "--max-errors", "0")
    done, want = loadgen("check", str(forged), *gate), loadgen("check", str(jsonl_only), *gate)
    assert done.returncode == want.returncode == 1, done.stdout
    assert done.stdout == want.stdout
    assert "FAIL  story overall: max-errors 0: errors = " in done.stdout


def test_export_writes_only_the_tokens_of_the_jsonl(run_dir: Path, tmp_path: Path) -> None:
    forged = _forged(run_dir, tmp_path / "forged", _token)
    jsonl_only = copy_of(run_dir, tmp_path / "jsonl-only", columns=False)
    for folder in (forged, jsonl_only):
        done = loadgen("export", str(folder))
        assert done.returncode == 0, done.stderr
    assert "PWNED" not in (forged / "canaries.csv").read_text()
    assert "canaries.columns" in loadgen("export", str(forged)).stderr  # the notice, on the terminal
    assert (forged / "canaries.csv").read_bytes() == (jsonl_only / "canaries.csv").read_bytes()
    assert pq.read_table(forged / "canaries.parquet").equals(pq.read_table(jsonl_only / "canaries.parquet"))


def _index(folder: Path) -> Any:
    return np.fromfile(columns_dir(folder / "canaries.jsonl") / "index", dtype=INDEX)


def _grow(path: Path, size: int) -> None:
    """``path`` made ``size`` bytes long with a hole: a few blocks on disk, gigabytes to whoever reads it."""
    with open(path, "r+b") as fh:
        fh.truncate(size)


def _sparse_ids(folder: Path) -> str:
    index = _index(folder)
    row = int(np.flatnonzero(index["n_ids"] > 0)[0])
    index["n_ids"][row] = 2**31 - 1  # its ids, 16 GiB of them, are "there": the ids file is grown to hold them
    index.tofile(columns_dir(folder / "canaries.jsonl") / "index")
    _grow(columns_dir(folder / "canaries.jsonl") / "ids", 17 << 30)
    return f"its row {row + 1}: it claims more values than its line's"


def _sparse_head(folder: Path) -> str:
    index = _index(folder)
    index["head"][0] = 2**31 - 1
    index.tofile(columns_dir(folder / "canaries.jsonl") / "index")
    _grow(columns_dir(folder / "canaries.jsonl") / "head", 3 << 30)
    return "its row 1: it claims more values than its line's"


def _sparse_index(folder: Path) -> str:
    _grow(columns_dir(folder / "canaries.jsonl") / "index", 64 << 30)  # a billion rows, all zeros past the eighth
    return "its row 9: it is not line 9 of the JSONL"


def _sparse_vocab(folder: Path) -> str:
    vocab = columns_dir(folder / "canaries.jsonl") / "vocab"
    with open(vocab, "r+b") as fh:  # its second word never ends: 8 GiB of zeros
        fh.truncate(vocab.read_bytes().index(b"\n") + 1)
        fh.seek(8 << 30)
        fh.write(b"\n")
    return "cannot be read (its vocabulary holds a word longer than the lines that use it)"


@pytest.mark.parametrize("craft", [_sparse_ids, _sparse_head, _sparse_index, _sparse_vocab])
def test_a_columns_row_that_claims_more_than_its_line_holds_is_not_read(
    run_dir: Path, tmp_path: Path, craft: Callable[[Path], str]
) -> None:
    folder = copy_of(run_dir, tmp_path / "crafted")
    says = craft(folder)
    done, peak_mib = peak_cli("report", str(folder))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert peak_mib < 400, peak_mib  # a report of this folder holds about 140 MiB
    notices = json.loads((folder / "report.json").read_text())["run"]["notices"]
    columns = [n for n in notices if n.startswith("canaries.columns:")]
    assert len(columns) == 1 and says in columns[0], columns
    jsonl_only = copy_of(run_dir, tmp_path / "jsonl-only", columns=False)
    assert loadgen("report", str(jsonl_only)).returncode == 0
    want = json.loads((jsonl_only / "report.json").read_text())
    assert _figures(json.loads((folder / "report.json").read_text())) == _figures(want)


def test_the_writer_covers_what_it_can_write_again_and_no_more(tmp_path: Path) -> None:
    """A logprob the server sent as an integer is written to the JSONL as ``0``: its row would give back ``0.0``,
    so the writer stops there and the reader reads that record from the JSONL, with no notice."""
    from tests.collectors.test_sidecar import collect, covered, plain

    odd = plain(3)
    odd.logprobs = [0, -0.5]
    run = collect(tmp_path / "run", [plain(0), plain(1), plain(2), odd, plain(4)])
    assert covered(run) == 3
    got = load_run(run, workers=1)
    assert [f.columns_notice for f in got.files] == [None]
    assert_same(got, load_run(run, reference=True))
    assert orjson.loads((run / "canaries.jsonl").read_bytes().splitlines()[3])["logprobs"] == [0, -0.5]
    assert os.path.getsize(columns_dir(run / "canaries.jsonl") / "index") == 3 * INDEX.itemsize
