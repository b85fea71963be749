"""Following a run folder while records are written: each record is read once, a line still being written
waits, a corrupt line is counted and skipped, every worker's file is followed."""

from __future__ import annotations

import threading
from pathlib import Path

import orjson

from collectors.jsonl import JsonlWriter
from loadgen.cli.progress.follow import CanaryTail, Follower
from loadgen.cli.progress.model import RunProgress, Snapshot
from loadgen.core.record import CanaryRecord
from loadgen.core.scenario import parse_scenario


def record(n: int, phase: str = "sweep", level: int = 0) -> CanaryRecord:
    return CanaryRecord("r", "c", f"id{n}", phase, level, 0, 1.7e9 + n, "ok", latency_s=0.1, token_ids=[1, n % 2])  # type: ignore[arg-type]


def test_tail_reads_each_complete_record_once_across_workers_files(tmp_path: Path) -> None:
    tail = CanaryTail(tmp_path)
    assert tail.read() == []  # nothing written yet
    a = JsonlWriter(tmp_path / "canaries-wA.jsonl")
    a.write(record(1))
    a.write(record(2))
    line = orjson.dumps(record(3).to_dict()) + b"\n"
    with open(tmp_path / "canaries-wB.jsonl", "ab", buffering=0) as b:
        b.write(line[:40])  # a record half written
        assert [r.request_id for r in tail.read()] == ["id1", "id2"]
        b.write(line[40:])
        a.write(record(4))
        assert sorted(r.request_id for r in tail.read()) == ["id3", "id4"]
        b.write(b'{"torn": \n')  # a line a killed writer cut, then a new line
        b.write(b'{"schema": 99, "run_id": "r"}\n')  # a record of a schema this version does not read
        b.write(orjson.dumps(record(5).to_dict()) + b"\n")
    a.close()
    assert [r.request_id for r in tail.read()] == ["id5"]
    assert tail.skipped == 2 and tail.read() == []


def test_follower_hands_over_snapshots_while_records_arrive_and_the_last_on_stop(tmp_path: Path) -> None:
    scenario = parse_scenario(
        {
            "name": "f",
            "endpoint": {"base_url": "http://127.0.0.1:9"},
            "canaries": [{"id": "c", "prompt": "x"}],
            "sweep": {"levels": [0, 2], "canaries_per_level": 3, "warmup": 0, "baseline": 2},
        },
        "test",
    )
    seen: list[Snapshot] = []
    got_some = threading.Event()

    def on_update(snap: Snapshot) -> None:
        seen.append(snap)
        if snap.done:
            got_some.set()

    follower = Follower(tmp_path, RunProgress(scenario), on_update, poll_s=0.02).start()
    writer = JsonlWriter(tmp_path / "canaries.jsonl")
    writer.write(record(0, "baseline"))
    assert got_some.wait(5)
    for n in range(1, 8):
        writer.write(record(n, "baseline" if n < 2 else "sweep", 0 if n < 5 else 2))
    writer.close()
    last = follower.stop()
    assert seen[0].done == 0 and seen[-1] == last
    assert last.done == 8 and last.current is None and [s.done for s in last.stages] == [2, 3, 3]
    assert [s.unique for s in last.stages] == [2, 2, 2] and [s.diverged for s in last.stages] == [None, 1, 2]
