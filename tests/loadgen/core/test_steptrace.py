"""The step trace contract: the id rule back to a record, the file a process writes, a writer that never raises."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.steptrace import ENV, StepRecord, StepWriter, file_name, record_key


@given(st.uuids(version=4), st.sampled_from(["cmpl-{}", "chatcmpl-{}", "cmpl-{}-0-1a2b3c4d", "{}", "rid-{}-x"]))
def test_record_key_finds_the_id_the_client_sent_in_any_wrapping(rid: uuid.UUID, wrap: str) -> None:
    assert record_key(wrap.format(rid.hex)) == rid.hex


def test_an_id_without_32_hex_digits_belongs_to_no_record() -> None:
    assert record_key("cmpl-1234") is None
    assert record_key("cmpl-" + "A" * 32) is None  # the client sends lowercase hex only


def test_writer_from_env_writes_one_line_a_step_in_its_own_file(tmp_path: Path) -> None:
    assert StepWriter.from_env("embedded", {}) is None
    writer = StepWriter.from_env("vllm", {ENV: str(tmp_path / "trace")})
    assert writer is not None and writer.path.name.startswith("engine_steps-vllm-")
    assert writer.write(StepRecord(0, 1.0, ["a", "b"], [5, 1], [0, 9], [5, 8], source="vllm"))
    assert writer.write(StepRecord(1, 2.0, ["b"], [1], [10], [8], source="vllm", preempted=["a"]))
    writer.close()
    lines = [orjson.loads(line) for line in writer.path.read_bytes().splitlines()]
    assert [line["step"] for line in lines] == [0, 1]
    assert lines[0]["ids"] == ["a", "b"] and lines[0]["computed"] == [0, 9] and lines[1]["preempted"] == ["a"]
    assert lines[0]["schema"] == 1 and lines[0]["source"] == "vllm"


def test_a_closed_writer_counts_a_failure_instead_of_raising(tmp_path: Path) -> None:
    writer = StepWriter(tmp_path / file_name("embedded", pid=7, host="h/x"))
    assert writer.path.name == "engine_steps-embedded-h_x-7.jsonl"
    writer.close()
    assert not writer.write(StepRecord(0, 0.0, [], [], [], []))
    assert writer.failures == 1
