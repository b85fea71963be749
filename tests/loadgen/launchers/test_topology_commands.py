"""The command lines a topology starts, pinned without vLLM, SGLang or a GPU: each server's and the router's.

The flags are those that ran on one H200 (docs/studies.md, "Prefill/decode topologies"): two ``vllm serve``
with ``NixlConnector`` and a distinct ``VLLM_NIXL_SIDE_CHANNEL_PORT`` each (or ``ExampleConnector`` with one
shared folder), ``--gpu-memory-utilization`` shares, vllm-router in PD mode with its own prometheus port.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable

import pytest

from loadgen.core.errors import ScenarioError
from loadgen.core.scenario import LauncherSpec, Side, TopologySpec
from loadgen.launchers.topology_commands import decode_alias, plan_router, plan_servers, with_kv_peers

VLLM = LauncherSpec(kind="vllm", model="/models/qwen3", args=["--enforce-eager", "--no-enable-prefix-caching"])
SHARE = ["--gpu-memory-utilization", "0.14"]


def ports(start: int = 8100) -> Callable[[], int]:
    counter = itertools.count(start)
    return lambda: next(counter)


def test_vllm_nixl_pair_distinct_side_channels_and_each_sides_own_flags() -> None:
    topology = TopologySpec(
        prefill=Side(args=SHARE, env={"VLLM_ATTENTION_BACKEND": "TRITON_ATTN"}),
        decode=Side(args=SHARE),
        connector_extra={"enforce_handshake_compat": False},
    )
    prefill, decode = plan_servers(VLLM, topology, "pd", ports())
    config = (
        '{"kv_connector":"NixlConnector","kv_role":"kv_both","kv_buffer_device":"cuda",'
        '"kv_connector_extra_config":{"enforce_handshake_compat":false}}'
    )
    assert prefill.plan.argv == [
        "vllm", "serve", "/models/qwen3", "--host", "127.0.0.1", "--port", "8100",
        "--enforce-eager", "--no-enable-prefix-caching", *SHARE, "--kv-transfer-config", config,
    ]  # fmt: skip
    assert decode.plan.argv[5:7] == ["--port", "8102"] and decode.plan.argv[-2:] == ["--kv-transfer-config", config]
    assert prefill.plan.env == {
        "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_ATTENTION_BACKEND": "TRITON_ATTN",
        "VLLM_NIXL_SIDE_CHANNEL_PORT": "8101",
    }
    assert decode.plan.env == {"VLLM_SERVER_DEV_MODE": "1", "VLLM_NIXL_SIDE_CHANNEL_PORT": "8103"}
    assert (prefill.name, prefill.role, prefill.log_name) == ("prefill", "prefill", "engine-prefill.log")
    assert (decode.name, decode.role, decode.log_name) == ("decode", "decode", "engine-decode.log")
    assert prefill.plan.ready_by == "health" and prefill.plan.health_url == "http://127.0.0.1:8100/health"


def test_a_side_channel_port_given_in_a_sides_env_is_kept() -> None:
    topology = TopologySpec(prefill=Side(env={"VLLM_NIXL_SIDE_CHANNEL_PORT": "5600"}))
    prefill, decode = plan_servers(VLLM, topology, "pd", ports())
    assert prefill.plan.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5600"
    assert decode.plan.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "8102"


def test_vllm_example_connector_shares_one_folder_and_needs_one() -> None:
    topology = TopologySpec(connector="example", kv_path="/dev/shm/kv")
    plans = plan_servers(VLLM, topology, "pd", ports())
    for p in plans:
        config = json.loads(p.plan.argv[p.plan.argv.index("--kv-transfer-config") + 1])
        assert config == {
            "kv_connector": "ExampleConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"shared_storage_path": "/dev/shm/kv"},
        }
        assert "VLLM_NIXL_SIDE_CHANNEL_PORT" not in p.plan.env
    with pytest.raises(ValueError, match="kv_path"):
        plan_servers(VLLM, TopologySpec(connector="example"), "pd", ports())


def test_reload_is_one_engine_serving_both_legs_named_twice_to_the_router() -> None:
    topology = TopologySpec(mode="reload", decode=Side(env={"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"}))
    (engine,) = plan_servers(VLLM, topology, "reload", ports())
    assert (engine.name, engine.role, engine.log_name) == ("engine", "both", "engine.log")
    assert engine.plan.env["VLLM_ATTENTION_BACKEND"] == "FLASH_ATTN"
    assert decode_alias("http://127.0.0.1:8100") == "http://localhost:8100"
    with pytest.raises(ScenarioError, match=r"127\.0\.0\.1"):
        decode_alias("http://10.0.0.5:8100")


def test_the_embedded_engine_gets_its_role_and_announces_its_port() -> None:
    spec = LauncherSpec(args=["--no-enable-prefix-caching"])
    topology = TopologySpec(prefill=Side(args=["--batch-invariant"]))
    prefill, decode = plan_servers(spec, topology, "pd", ports(), python="/py")
    assert prefill.plan.argv == [
        "/py", "-P", "-m", "loadgen.engine", "--host", "127.0.0.1", "--port", "0",
        "--no-enable-prefix-caching", "--batch-invariant", "--role", "prefill",
    ]  # fmt: skip
    assert decode.plan.argv[-3:] == ["--no-enable-prefix-caching", "--role", "decode"]
    assert prefill.plan.ready_by == "line" and prefill.plan.env == {}
    (both,) = plan_servers(spec, TopologySpec(mode="reload"), "reload", ports(), python="/py")
    assert both.plan.argv[-4:] == ["--role", "both", "--kv-peers", "self"]  # its own prefiller


def test_an_embedded_decoder_is_told_its_started_prefillers_and_no_other_plan_changes() -> None:
    prefill, decode = plan_servers(LauncherSpec(), TopologySpec(), "pd", ports(), python="/py")
    urls = ["http://127.0.0.1:8100", "http://0.0.0.0:8101"]  # a wildcard host advertises 127.0.0.1
    assert with_kv_peers(decode, "embedded", urls).plan.argv[-2:] == ["--kv-peers", "127.0.0.1:8100,127.0.0.1:8101"]
    assert with_kv_peers(prefill, "embedded", urls) == prefill
    assert with_kv_peers(decode, "vllm", urls) == decode


def test_sglang_pair_with_a_bootstrap_port_on_the_prefill_side() -> None:
    spec = LauncherSpec(kind="sglang", model="/models/qwen3", executable="/opt/sgl/bin/python")
    prefill, decode = plan_servers(spec, TopologySpec(), "pd", ports())
    assert prefill.plan.argv == [
        "/opt/sgl/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/qwen3",
        "--host", "127.0.0.1", "--port", "8100", "--enable-metrics",
        "--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "nixl",
        "--disaggregation-bootstrap-port", "8101",
    ]  # fmt: skip
    assert prefill.bootstrap_port == 8101 and decode.bootstrap_port is None
    assert decode.plan.argv[-4:] == ["--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "nixl"]
    fixed = plan_servers(spec, TopologySpec(connector="mooncake", bootstrap_port=8998), "pd", ports())
    assert fixed[0].bootstrap_port == 8998 and "mooncake" in fixed[0].plan.argv


def test_vllm_router_in_pd_mode_with_its_own_prometheus_port() -> None:
    topology = TopologySpec.model_validate({"router": {"args": ["--request-timeout-secs", "900"], "env": {"X": "1"}}})
    plan = plan_router(
        "vllm", topology, [("http://127.0.0.1:8100", None)], ["http://127.0.0.1:8200"], 8000, 29001, python="/py"
    )
    assert plan.argv == [
        "/py", "-m", "vllm_router.launch_router", "--vllm-pd-disaggregation",
        "--prefill", "http://127.0.0.1:8100", "--decode", "http://127.0.0.1:8200",
        "--host", "127.0.0.1", "--port", "8000", "--prometheus-port", "29001",
        "--worker-startup-check-interval", "1", "--request-timeout-secs", "900",
    ]  # fmt: skip
    assert plan.env == {"X": "1"} and plan.ready_by == "health"
    assert (plan.base_url, plan.health_url) == ("http://127.0.0.1:8000", "http://127.0.0.1:8000/health")
    other = TopologySpec.model_validate({"router": {"executable": "/opt/router/bin/python"}})
    assert plan_router("embedded", other, [("u", None)], ["d"], 1, 2).argv[:3] == [
        "/opt/router/bin/python",
        "-m",
        "vllm_router.launch_router",
    ]


def test_sglang_router_takes_each_prefill_servers_bootstrap_port() -> None:
    plan = plan_router(
        "sglang",
        TopologySpec(),
        [("http://127.0.0.1:8100", 8998)],
        ["http://127.0.0.1:8200"],
        8000,
        29002,
        python="/py",
    )
    assert plan.argv == [
        "/py", "-m", "sglang_router.launch_router", "--pd-disaggregation",
        "--prefill", "http://127.0.0.1:8100", "8998", "--decode", "http://127.0.0.1:8200",
        "--host", "127.0.0.1", "--port", "8000", "--prometheus-port", "29002",
    ]  # fmt: skip


def test_vllm_nixl_push_pair_names_the_push_connector_and_keeps_distinct_side_channels() -> None:
    prefill, decode = plan_servers(VLLM, TopologySpec(connector="nixl-push"), "pd", ports())
    for server in (prefill, decode):
        config = json.loads(server.plan.argv[server.plan.argv.index("--kv-transfer-config") + 1])
        assert config == {"kv_connector": "NixlPushConnector", "kv_role": "kv_both", "kv_buffer_device": "cuda"}
    assert {prefill.plan.env["VLLM_NIXL_SIDE_CHANNEL_PORT"], decode.plan.env["VLLM_NIXL_SIDE_CHANNEL_PORT"]} == {
        "8101",
        "8103",
    }
