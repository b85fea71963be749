"""Collectors fed with synthetic events through Locust's real EventHook: no HTTP."""

import dataclasses
from pathlib import Path

from locust.event import EventHook

from collectors.canary import BackgroundCollector, CanaryCollector
from collectors.jsonl import read_jsonl
from loadgen.core.background_row import FIELDS, BackgroundRow
from loadgen.core.record import CanaryRecord


def rec(i: int, status: str = "ok") -> CanaryRecord:
    return CanaryRecord(
        run_id="r",
        canary_id="c",
        request_id=f"q{i}",
        phase="sweep",
        level=i % 3,
        inflight_at_send=0,
        sent_at=float(i),
        status=status,  # type: ignore[arg-type]
        token_ids=[i, i + 1],
    )


def test_every_fired_record_is_on_disk_before_close(tmp_path: Path) -> None:
    hook = EventHook()
    col = CanaryCollector(tmp_path / "canaries.jsonl")
    col.register(hook)
    for i in range(50):
        hook.fire(record=rec(i, "ok" if i % 7 else "error"))
        # flushed per record: a reader sees it at once, without close()
        assert len(read_jsonl(tmp_path / "canaries.jsonl").rows) == i + 1
    col.close()
    rows = read_jsonl(tmp_path / "canaries.jsonl").rows
    assert [r["request_id"] for r in rows] == [f"q{i}" for i in range(50)]
    fired = [("c", "sweep", i % 3, "ok" if i % 7 else "error") for i in range(50)]
    assert [(r["canary_id"], r["phase"], r["level"], r["status"]) for r in rows] == fired
    hook.fire(record=rec(99))  # after close: unregistered, nothing written
    assert len(read_jsonl(tmp_path / "canaries.jsonl").rows) == 50


def test_write_failures_are_counted_not_raised(tmp_path: Path) -> None:
    col = CanaryCollector(tmp_path / "canaries.jsonl")
    bad = rec(1)
    bad.usage = {"x": object()}  # not serialisable
    col.on_record(bad)
    col.on_record(rec(2))
    assert col.writer.failures == 1 and col.writer.written == 1
    col.close()


def background(i: int) -> BackgroundRow:
    ok = i % 3 != 0
    return BackgroundRow(
        level=4,
        phase="sweep",
        sent_at=100.0 + i,
        latency_s=0.1,
        ttft_s=0.01 if ok else None,
        status="ok" if ok else "error",
        error_kind=None if ok else "http_status",
        error_message=None if ok else "HTTP 503: busy",
        http_status=200 if ok else 503,
        shared_prefix=i % 2 == 0,
        prompt_tokens=12 if ok else None,
        completion_tokens=8 if ok else None,
    )


def test_background_collector_writes_every_row_by_close(tmp_path: Path) -> None:
    col = BackgroundCollector(tmp_path / "background.jsonl")
    rows = [background(i) for i in range(10)]
    for row in rows:
        col.on_request(row)
    col.close()
    read = read_jsonl(tmp_path / "background.jsonl").rows
    assert read == [dataclasses.asdict(r) for r in rows] and all(tuple(r) == FIELDS for r in read)  # in field order
    assert col.writer.written == 10 and col.writer.failures == 0


def test_torn_last_line_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "canaries.jsonl"
    col = CanaryCollector(path)
    for i in range(3):
        col.on_record(rec(i))
    col.close()
    with open(path, "ab") as fh:
        fh.write(b'{"schema": 1, "run_id": "r", "tok')
    got = read_jsonl(path)
    assert len(got.rows) == 3 and got.skipped == 1 and got.skipped_lines == [4]
