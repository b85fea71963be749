"""``OwnedRun.end`` takes the caller's notices (a part of the endpoint that died) into the manifest by its own write."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.core.manifest import RunStatus, read_manifest
from loadgen.runs.lifecycle import OwnedRun


def test_the_callers_notices_reach_the_manifest_and_the_report_beside_the_ends_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "reports"))  # runkit: hand-made runs
    from tests.reports.runkit import rec, write_run

    records = [rec([1, 2], phase="baseline"), rec([1, 2], level=0)]
    run_dir = write_run(tmp_path / "run", records, status="running", notices=["said at the start"])
    died = "the decode server (role decode) exited with code -9 during the run; its log: engine-decode.log"
    assert OwnedRun(run_dir, None).end(RunStatus.INTERRUPTED, notices_from_caller=[died]) == RunStatus.INTERRUPTED
    manifest = read_manifest(run_dir)
    assert manifest.status == RunStatus.INTERRUPTED and manifest.notices == ["said at the start", died]
    assert died in (run_dir / "report.md").read_text()
