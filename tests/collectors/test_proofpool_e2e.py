"""A columns file proven in several processes is proven exactly as one process proves it.

Records go through the real collector; the parent's thresholds are lowered so that a small file is cut into ranges
that forkserver children prove. Whatever the columns file holds (all honest, a row forged in a later range, a torn
tail), the rows taken from it, the notice and the columns read equal those of one process proving alone, and the
JSONL read alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from collectors.read import proofpool
from collectors.read.runfolder import RunData, load_run
from collectors.sidecar import columns_dir
from tests.collectors.forgekit import forge, records
from tests.collectors.test_fastcolumns_property import assert_same
from tests.collectors.test_sidecar import collect, plain

ROWS = 1200


def _honest(run_dir: Path) -> None:
    pass


def _forged(run_dir: Path) -> None:
    rows, lines = records(run_dir / "canaries.jsonl")
    rows[1000].text = "forged"
    forge(run_dir / "canaries.jsonl", rows, lines)


def _torn(run_dir: Path) -> None:
    index = columns_dir(run_dir / "canaries.jsonl") / "index"
    os.truncate(index, index.stat().st_size - 70)  # a killed writer: the last row and a half gone


def _not_alone(*_: object) -> None:
    raise AssertionError("proved in this process, not by children")


def _read(run_dir: Path, monkeypatch: pytest.MonkeyPatch, *, children: bool) -> RunData:
    with monkeypatch.context() as patch:
        if children:
            patch.setattr(proofpool, "PROVE_MIN_BYTES", 1)
            patch.setattr(proofpool, "RANGE_ROWS", 250)
            patch.setattr(proofpool, "_cores", lambda: 2)
            patch.setattr(proofpool, "_gevent_loaded", lambda: False)  # pytest imports it (unpatched): no Locust here
            patch.setattr(proofpool, "prove", _not_alone)
        return load_run(run_dir, workers=1)


@pytest.mark.parametrize("craft", [_honest, _forged, _torn])
def test_children_prove_what_one_process_proves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, craft: Callable[[Path], None]
) -> None:
    run_dir = collect(tmp_path / "run", [plain(i) for i in range(ROWS)])
    craft(run_dir)
    got = _read(run_dir, monkeypatch, children=True)
    alone = _read(run_dir, monkeypatch, children=False)
    notices = [f.columns_notice for f in got.files]
    assert notices == [f.columns_notice for f in alone.files]
    if craft is _forged:
        assert notices == [
            "canaries.columns: its row 1001 is not line 1001 of the JSONL; read from canaries.jsonl from line 1,001 on"
        ]
    else:
        assert notices == [None]
    assert_same(got, alone)
    got.files[0].columns_notice = None
    assert_same(got, load_run(run_dir, reference=True))
