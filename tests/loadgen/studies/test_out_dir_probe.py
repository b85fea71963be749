"""``--out`` is tried for real before any traffic, and processes started together on one ``--out`` (a matrix's
shares) must not fail each other: a folder another probe made just now is not this probe's to remove, and a
folder removed under a probe by another one is tried again."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from loadgen.core.errors import UsageError
from loadgen.studies.run import check_options


def test_probes_of_one_out_started_together_all_pass_and_leave_no_file(tmp_path: Path) -> None:
    failures: list[BaseException] = []
    start = threading.Barrier(8)

    def probe(name: str) -> None:
        start.wait()
        for _ in range(40):
            try:
                check_options(tmp_path / "out" / "cells" / name, 0)
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                failures.append(exc)

    threads = [threading.Thread(target=probe, args=(f"c{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    # no probe leaves a file; a folder one probe made while another worked inside it may stay, empty
    assert [p for p in tmp_path.rglob("*") if not p.is_dir()] == []


def test_an_out_under_a_file_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(UsageError, match=r"cannot be made: .*f is a file"):
        check_options(tmp_path / "f" / "runs", 0)
