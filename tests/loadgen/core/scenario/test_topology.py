"""The [topology] section and the topology fields of [[matrix.cells]]: mistakes fail at load time, naming the field."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from loadgen.core.errors import ScenarioError
from loadgen.core.scenario import parse_scenario

CANARY = [{"id": "c", "prompt": "hello"}]
VLLM = {"kind": "vllm", "model": "Qwen/Qwen3-0.6B"}


def _load(**sections: Any) -> Any:
    return parse_scenario({"canaries": CANARY, **sections}, "s.toml")


def test_a_pd_scenario_reads_as_written() -> None:
    text = """
    [[canaries]]
    prompt = "hello"
    [launcher]
    kind = "vllm"
    model = "Qwen/Qwen3-0.6B"
    args = ["--enforce-eager"]
    [topology]
    connector = "example"
    kv_path = "/dev/shm/kv"
    [topology.prefill]
    args = ["--gpu-memory-utilization", "0.14"]
    env = { VLLM_ATTENTION_BACKEND = "TRITON_ATTN" }
    [topology.decode]
    env = { CUDA_VISIBLE_DEVICES = "1" }
    [[matrix.cells]]
    name = "colocated"
    topology = "colocated"
    [[matrix.cells]]
    name = "foreign"
    prefill.env = { VLLM_ATTENTION_BACKEND = "FLASH_ATTN" }
    compare_to = "colocated"
    decoder_direct = true
    """
    s = parse_scenario(tomllib.loads(text), "s.toml")
    assert s.topology is not None and s.matrix is not None
    assert s.topology.mode == "pd" and s.topology.connector == "example"
    assert s.topology.prefill.args == ["--gpu-memory-utilization", "0.14"]
    assert s.topology.decode.env == {"CUDA_VISIBLE_DEVICES": "1"}
    foreign = s.matrix.cells[1]
    assert foreign.topology is None and foreign.prefill.over(s.topology.prefill).env == {
        "VLLM_ATTENTION_BACKEND": "FLASH_ATTN"
    }
    assert foreign.compare_to == "colocated" and foreign.decoder_direct
    assert _load().topology is None  # optional: a plain scenario is unchanged


@pytest.mark.parametrize(
    ("sections", "field", "words"),
    [
        ({"launcher": {"kind": "llamacpp", "model": "m"}, "topology": {}}, "topology", "embedded, vllm or sglang"),
        ({"launcher": {"kind": "embedded", "port": 8000}, "topology": {}}, "topology", "launcher.port"),
        ({"launcher": {"kind": "sglang", "model": "m"}, "topology": {"mode": "reload"}}, "topology", "both legs"),
        ({"launcher": VLLM, "topology": {"connector": "mooncake"}}, "topology", "one of: nixl, nixl-push, example"),
        ({"topology": {"connector": "example"}}, "topology", "one of: nixl"),
        ({"launcher": VLLM, "topology": {"kv_path": "/dev/shm/kv"}}, "topology", "connector = 'example'"),
        (
            {"launcher": {**VLLM, "args": ["--kv-transfer-config", "{}"]}, "topology": {}},
            "topology",
            "launcher.args has --kv-transfer-config",
        ),
        (
            {"launcher": {"kind": "sglang", "model": "m"}, "topology": {"decode": {"args": ["--disaggregation-mode"]}}},
            "topology",
            "topology.decode.args has --disaggregation-mode",
        ),
        ({"topology": {"mode": "split"}}, "topology.mode", "'colocated', 'pd' or 'reload'"),
        ({"topology": {"prefill": {"argz": []}}}, "topology.prefill.argz", "unknown field"),
        ({"topology": {"decode": {"env": {"HF_TOKEN": "x"}}}}, "topology.decode.env", "looks like a secret"),
        ({"topology": {"router": {"ready_timeout_s": 0}}}, "topology.router.ready_timeout_s", "greater than 0"),
        (
            {"matrix": {"cells": [{"name": "a"}, {"name": "b", "compare_to": "c"}]}},
            "matrix.cells",
            "compare_to 'c' is not a cell",
        ),
        ({"matrix": {"cells": [{"name": "a", "compare_to": "a"}, {"name": "b"}]}}, "matrix.cells[0]", "itself"),
        (
            {"matrix": {"cells": [{"name": "a", "base_url": "http://h:1", "decoder_direct": True}, {"name": "b"}]}},
            "matrix.cells[0]",
            "starts no engine",
        ),
    ],
)
def test_topology_mistakes_name_the_field(sections: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ScenarioError) as err:
        _load(**sections)
    assert f"field {field}: " in str(err.value) and words in str(err.value), str(err.value)
