"""Pins the on-disk keys of a canary record: outside tools read them (docs/design.md)."""

import dataclasses

import orjson
import pytest

from loadgen.core.errors import RunFolderError
from loadgen.core.record import SCHEMA, CanaryRecord

CONTRACT_KEYS = {
    "schema",
    "run_id",
    "canary_id",
    "request_id",
    "level",
    "inflight_at_send",
    "sent_at",
    "latency_s",
    "ttft_s",
    "status",
    "error_kind",
    "token_ids",
    "tokens",
    "logprobs",
    "top_logprobs",
    "text",
    "finish_reason",
    "usage",
    "phase",
}


def sample() -> CanaryRecord:
    return CanaryRecord(
        run_id="r",
        canary_id="c",
        request_id="q",
        phase="sweep",
        level=4,
        inflight_at_send=4,
        sent_at=1.5,
        status="ok",
        latency_s=0.2,
        token_ids=[1, 2],
        tokens=["a", "b"],
        logprobs=[-0.1, -0.2],
        top_logprobs=[[("a", -0.1), ("x", -2.0)], [("b", -0.2)]],
        text="ab",
    )


def test_contract_keys_are_all_written() -> None:
    assert set(sample().to_dict()) >= CONTRACT_KEYS


def test_round_trip_through_json() -> None:
    rec = sample()
    back = CanaryRecord.from_dict(orjson.loads(orjson.dumps(rec.to_dict())))
    assert back == rec


def test_unknown_fields_are_ignored_and_unknown_schema_rejected() -> None:
    raw = {**sample().to_dict(), "from_the_future": 1}
    assert CanaryRecord.from_dict(raw).canary_id == "c"
    with pytest.raises(RunFolderError, match="schema 99"):
        CanaryRecord.from_dict({**raw, "schema": 99}, where="canaries.jsonl:3")


def test_missing_required_field_is_named() -> None:
    raw = sample().to_dict()
    del raw["level"]
    with pytest.raises(RunFolderError, match="level"):
        CanaryRecord.from_dict(raw)


def test_schema_constant_matches_default() -> None:
    fields = {f.name: f for f in dataclasses.fields(CanaryRecord)}
    assert fields["schema"].default == SCHEMA == 1
