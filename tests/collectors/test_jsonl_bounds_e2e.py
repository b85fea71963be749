"""A run folder's JSON-lines files are read no further than a record of the run can reach: sparse files and lines
without end are refused with one line naming the file, and the reader's memory stays small.

One real run on the embedded engine (``forgekit.real_run``), copied, then one of its JSON-lines files grown to
64 GiB (the bound a file may hold) by ``truncate``: a hole, a few blocks on disk, that reads as zeros without a
line break. ``loadgen report``, ``check`` and ``export`` run in a child with its address space capped, which
says how much memory it held at most. Then a line of real bytes longer than any record of the run can be (the
manifest's ``endpoint.max_response_bytes``, twice, and room for the request).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.collectors.forgekit import copy_of, peak_cli, real_run

BOUND = 64 << 30  # loadgen.core.runfiles.RECORDS_LIMIT: the largest JSON-lines file a run folder may hold


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return real_run(tmp_path_factory.mktemp("real") / "out")


def _file(folder: Path, pattern: str) -> Path:
    (path,) = sorted(folder.glob(pattern))
    return path


@pytest.mark.parametrize("pattern", ["canaries.jsonl", "background.jsonl", "engine_metrics.jsonl", "engine_steps-*"])
@pytest.mark.parametrize("command", ["report", "check", "export"])
def test_a_sparse_jsonl_file_is_refused_naming_it(run_dir: Path, tmp_path: Path, pattern: str, command: str) -> None:
    folder = copy_of(run_dir, tmp_path / "run")
    path = _file(folder, pattern)
    with open(path, "r+b") as fh:
        fh.truncate(BOUND)
        hole = os.lseek(fh.fileno(), 0, os.SEEK_HOLE)  # where its last block of records ends
    args = [command, str(folder), *(["--max-errors", "9"] if command == "check" else [])]
    done, peak_mib = peak_cli(*args)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    (line,) = [x for x in done.stderr.splitlines() if "refused" in x]
    assert line.startswith(f"loadgen {command}: error: {path}: bytes {hole:,} to {BOUND:,} of its {BOUND:,} were never")
    assert f"truncate the file at byte {hole:,} to read what comes before" in line
    assert peak_mib < 400, peak_mib  # reading this folder whole holds about 140 MiB


def test_a_line_longer_than_any_record_of_the_run_is_refused(run_dir: Path, tmp_path: Path) -> None:
    folder = copy_of(run_dir, tmp_path / "run")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["scenario"]["endpoint"]["max_response_bytes"] = 1024  # a record of this run is at most 16 MiB + 2 KiB
    (folder / "manifest.json").write_text(json.dumps(manifest))
    path = folder / "canaries.jsonl"
    lines = len(path.read_bytes().splitlines())
    with open(path, "ab") as fh:
        fh.write(b'{"text":"' + b"a" * (17 << 20) + b'"}\n')
    done, peak_mib = peak_cli("report", str(folder))
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    limit = 2 * 1024 + (16 << 20)
    assert (
        f"{path} line {lines + 1}: more than {limit:,} bytes without a line break, longer than any record of this "
        "file can be; refused"
    ) in done.stderr
    assert peak_mib < 400, peak_mib
