"""Records reported but not read, with ``n > 1`` canaries (``reports.analysis.health``): the load side counts
requests, an ``n``-choice request is ``n`` records, so a lost record is seen whether its whole request or one
choice of it went missing, and a run with nothing lost says nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from collectors.read.runfolder import load_run
from reports.analysis.build import build_report
from tests.reports.runkit import rec, write_run

SCENARIO = {
    "name": "test",
    "canaries": [
        {"id": "g", "temperature": 1.0, "seed": 5, "n": 3},
        {"id": "c0", "temperature": 0.0, "seed": 0, "n": 1},
    ],
}
REQUESTS = 4  # of each canary


def records() -> list[dict[str, Any]]:
    out = []
    for i in range(REQUESTS):
        phase, level = ("baseline", 0) if i == 0 else ("sweep", 1)
        out += [rec([1, 2, j], phase=phase, level=level, canary=f"g.choice{j}", request_id=f"g{i}") for j in range(3)]
        out.append(rec([1, 2], phase=phase, level=level, canary="c0"))
    return out


def not_read(tmp_path: Path, kept: list[dict[str, Any]], reported: int) -> int:
    run_dir = write_run(tmp_path / "run", kept, levels=[1], scenario=SCENARIO, canaries_reported=reported)
    health: Any = build_report(load_run(run_dir))["health"]
    return int(health["canaries_reported_not_read"])


def test_every_record_read_is_nothing_lost(tmp_path: Path) -> None:
    assert not_read(tmp_path, records(), 2 * REQUESTS) == 0  # 16 records, 8 requests: the coordinator's count


@pytest.mark.parametrize(
    ("lost", "seen"),
    [
        (lambda r: r["canary_id"] == "c0" and r["phase"] == "sweep", REQUESTS - 1),  # n = 1 requests gone
        (lambda r: r["request_id"] == "g2", 1),  # a whole n = 3 request gone: one request
        (lambda r: r["canary_id"] == "g.choice2" and r["request_id"] in ("g1", "g3"), 2),  # one choice of two
        (lambda r: r["canary_id"] == "g.choice0" and r["request_id"] == "g0", 1),  # the first choice of one
    ],
    ids=["single", "whole-request", "last-choices", "first-choice"],
)
def test_a_lost_record_is_seen_whatever_its_request_held(tmp_path: Path, lost: Any, seen: int) -> None:
    kept = [r for r in records() if not lost(r)]
    assert len(kept) < len(records())
    assert not_read(tmp_path, kept, 2 * REQUESTS) == seen
