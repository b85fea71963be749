"""server_config: the settings a server states about itself, from real vLLM 0.26 /metrics and from
vLLM /server_info- and SGLang /get_server_info-shaped answers; nothing the server did not state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.core.wire.server_config import describe, info_series, server_settings

H200 = Path(__file__).with_name("fixtures") / "vllm-0.26-h200"
SETTINGS = (
    "prefix_caching",
    "block_size",
    "batch_invariant",
    "enforce_eager",
    "attention_backend",
    "max_num_seqs",
    "dtype",
    "tensor_parallel_size",
    "custom_all_reduce",
    "metrics_refresh_steps",
    "cached_tokens_reported",
)

# vLLM /server_info?config_format=json (VLLM_SERVER_DEV_MODE=1): the parts server_settings reads
VLLM_SERVER_INFO: dict[str, Any] = {
    "vllm_config": {
        "cache_config": {"enable_prefix_caching": False, "block_size": 32},
        "model_config": {"enforce_eager": True, "dtype": "torch.bfloat16"},
        "scheduler_config": {"max_num_seqs": 256},
        "attention_config": {"backend": "FLASH_ATTN"},
        "parallel_config": {"tensor_parallel_size": 1, "disable_custom_all_reduce": False},
    },
    "vllm_env": {"VLLM_BATCH_INVARIANT": "1"},
}

# SGLang /get_server_info: its server arguments, flat
SGLANG_INFO: dict[str, Any] = {
    "disable_radix_cache": True,
    "enable_deterministic_inference": True,
    "page_size": 1,
    "disable_cuda_graph": False,
    "attention_backend": "triton",
    "max_running_requests": 48,
    "dtype": "bfloat16",
    "decode_log_interval": 40,
    "version": "0.5.6",
}


def idle_metrics() -> str:
    return (H200 / "default-metrics-idle.txt").read_text(encoding="utf-8")


def test_info_series_of_real_vllm_metrics_finds_the_cache_config() -> None:
    info = info_series(idle_metrics())
    cache = info["vllm:cache_config_info"]
    assert cache["enable_prefix_caching"] == "True"
    assert cache["block_size"] == "16"
    assert cache["prefix_caching_hash_algo"] == "sha256" and cache["engine"] == "0"
    assert info["python_info"]["version"] == "3.12.3"
    # only *_info gauges: counters, histograms and HELP/TYPE lines are not info series
    assert set(info) == {"python_info", "vllm:cache_config_info"}


def test_info_series_of_busy_metrics_is_the_same_as_idle() -> None:
    busy = (H200 / "default-metrics-busy.txt").read_text(encoding="utf-8")
    assert info_series(busy) == info_series(idle_metrics())


def test_settings_from_real_metrics_alone_state_only_what_metrics_say() -> None:
    settings = server_settings(info_series(idle_metrics()), None, None, cached_tokens_reported=None)
    assert settings["prefix_caching"] is True and settings["block_size"] == 16
    # /metrics says nothing of these: None, never a guessed default
    for key in ("batch_invariant", "enforce_eager", "attention_backend", "max_num_seqs", "dtype"):
        assert settings[key] is None, key
    assert settings["cached_tokens_reported"] is None


@pytest.mark.parametrize("name", ["default-server-config.json", "invariant-server-config.json"])
def test_captured_server_config_agrees_with_its_own_info_series(name: str) -> None:
    """What the probe recorded on the H200 is what server_settings makes of the info series it recorded."""
    recorded = orjson.loads((H200 / name).read_bytes())
    assert recorded["answered"] == ["/metrics", "/server_info"]
    # recorded by a tool that did not read tensor parallelism or the gauge's refresh yet: every other setting
    assert set(recorded["settings"]) == set(SETTINGS) - {
        "tensor_parallel_size",
        "custom_all_reduce",
        "metrics_refresh_steps",
    }
    from_metrics = server_settings(recorded["info_series"], None, None, cached_tokens_reported=None)
    for key in ("prefix_caching", "block_size"):
        assert from_metrics[key] == recorded["settings"][key], key
    assert recorded["settings"]["prefix_caching"] is True and recorded["settings"]["block_size"] == 16


def test_captured_server_configs_tell_the_two_modes_apart() -> None:
    default = orjson.loads((H200 / "default-server-config.json").read_bytes())["settings"]
    invariant = orjson.loads((H200 / "invariant-server-config.json").read_bytes())["settings"]
    assert default["batch_invariant"] is False and invariant["batch_invariant"] is True
    # the default server ran without --enable-prompt-tokens-details, the invariant one with it
    assert default["cached_tokens_reported"] is False and invariant["cached_tokens_reported"] is True
    assert describe(default).startswith("prefix caching on (block 16), batch-invariant off, CUDA graphs")
    assert describe(default).endswith("max 1024 sequences, cached tokens not reported")
    assert "batch-invariant on" in describe(invariant) and "cached tokens" not in describe(invariant)


def test_vllm_server_info_gives_every_setting() -> None:
    settings = server_settings({}, VLLM_SERVER_INFO, None, cached_tokens_reported=True)
    assert settings == {
        "prefix_caching": False,
        "block_size": 32,
        "batch_invariant": True,
        "enforce_eager": True,
        "attention_backend": "FLASH_ATTN",
        "max_num_seqs": 256,
        "dtype": "torch.bfloat16",
        "tensor_parallel_size": 1,
        "custom_all_reduce": True,
        "metrics_refresh_steps": None,  # vLLM does not say (it refreshes every step)
        "cached_tokens_reported": True,
    }


def test_metrics_info_series_win_over_server_info() -> None:
    info = info_series(idle_metrics())  # prefix caching on, block 16
    settings = server_settings(info, VLLM_SERVER_INFO, None, cached_tokens_reported=False)
    assert settings["prefix_caching"] is True and settings["block_size"] == 16
    assert settings["enforce_eager"] is True and settings["max_num_seqs"] == 256  # the rest from /server_info


def test_attention_backend_from_vllm_env_when_the_config_has_none() -> None:
    server_info = {"vllm_config": {}, "vllm_env": {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}}
    assert server_settings({}, server_info, None, cached_tokens_reported=None)["attention_backend"] == "FLASHINFER"


def test_sglang_server_info_gives_every_setting() -> None:
    settings = server_settings({}, None, SGLANG_INFO, cached_tokens_reported=None)
    assert settings == {
        "prefix_caching": False,  # disable_radix_cache = True
        "block_size": 1,
        "batch_invariant": True,
        "enforce_eager": False,
        "attention_backend": "triton",
        "max_num_seqs": 48,
        "dtype": "bfloat16",
        "tensor_parallel_size": None,
        "custom_all_reduce": None,
        "metrics_refresh_steps": 40,  # decode_log_interval
        "cached_tokens_reported": None,
    }
    radix_on = server_settings({}, None, {**SGLANG_INFO, "disable_radix_cache": False}, cached_tokens_reported=None)
    assert radix_on["prefix_caching"] is True


@pytest.mark.parametrize(
    ("server_info", "sglang_info"),
    [
        (None, None),
        ({}, {}),
        ("not json object", ["a", "list"]),
        ({"vllm_config": "text", "vllm_env": None}, {"unrelated": 1}),
        ({"vllm_config": {"cache_config": None, "model_config": []}}, None),
    ],
)
def test_unstated_settings_stay_none(server_info: Any, sglang_info: Any) -> None:
    settings = server_settings({}, server_info, sglang_info, cached_tokens_reported=None)
    assert settings == dict.fromkeys(SETTINGS)
    assert describe(settings) == ""


@pytest.mark.parametrize("value", ["None", "maybe", "2", 2, [], {}])
def test_values_that_are_not_a_flag_or_a_number_are_not_read_as_one(value: Any) -> None:
    info = {"vllm:cache_config_info": {"enable_prefix_caching": str(value), "block_size": str(value)}}
    server_info = {
        "vllm_config": {"model_config": {"enforce_eager": value}, "scheduler_config": {"max_num_seqs": value}},
        "vllm_env": {"VLLM_BATCH_INVARIANT": value},
    }
    settings = server_settings(info, server_info, None, cached_tokens_reported=None)
    assert settings["prefix_caching"] is None and settings["batch_invariant"] is None
    assert settings["enforce_eager"] is None
    if value != "2" and value != 2:
        assert settings["block_size"] is None and settings["max_num_seqs"] is None


def test_booleans_are_not_read_as_numbers() -> None:
    server_info = {"vllm_config": {"cache_config": {"block_size": True}, "scheduler_config": {"max_num_seqs": False}}}
    settings = server_settings({}, server_info, None, cached_tokens_reported=None)
    assert settings["block_size"] is None and settings["max_num_seqs"] is None


@pytest.mark.parametrize(
    ("spelling", "meaning"),
    [("True", True), ("true", True), ("1", True), (1, True), (True, True), ("False", False), ("0", False), (0, False)],
)
def test_flags_as_servers_spell_them(spelling: Any, meaning: bool) -> None:
    settings = server_settings({}, {"vllm_env": {"VLLM_BATCH_INVARIANT": spelling}}, None, cached_tokens_reported=None)
    assert settings["batch_invariant"] is meaning


def test_hostile_metrics_cannot_grow_the_info_series_without_end() -> None:
    lines = [f'evil_{i}_info{{k="{"x" * 1000}",n="{i}"}} 1.0' for i in range(5000)]
    lines[3] = f'evil_3_info{{k="{"x" * 1_000_000}",n="3"}} 1.0'  # one label value of a megabyte
    info = info_series("\n".join(lines))
    assert len(info) == 32
    assert list(info) == [f"evil_{i}_info" for i in range(32)]  # the first ones, in order
    for labels in info.values():
        assert len(labels["k"]) == 200 and set(labels["k"]) == {"x"}
    assert sum(len(v) for labels in info.values() for v in labels.values()) <= 32 * 2 * 200


def test_info_series_keeps_the_first_sample_of_each_name() -> None:
    text = "\n".join(
        [
            "# HELP a_info first",
            'a_info{engine="0",block_size="16"} 1.0',
            'a_info{engine="1",block_size="32"} 1.0',
            "a_info_total 3.0",
            "b_info 1.0",  # no labels: nothing to read
            'vllm:num_requests_running{engine="0"} 2.0',
        ]
    )
    assert info_series(text) == {"a_info": {"engine": "0", "block_size": "16"}}


def test_info_series_of_text_that_is_not_prometheus_is_empty() -> None:
    assert info_series("") == {}
    assert info_series("<html><body>not metrics</body></html>") == {}
    assert info_series('{"object": "error"}') == {}


def test_describe_says_only_what_was_stated() -> None:
    assert describe({"prefix_caching": False}) == "prefix caching off"
    assert describe({"prefix_caching": True, "block_size": 16}) == "prefix caching on (block 16)"
    assert describe({"block_size": 16}) == ""  # a block size alone does not say whether caching is on
    assert describe({"batch_invariant": True, "enforce_eager": True}) == "batch-invariant on, eager"
    assert describe({"enforce_eager": False, "attention_backend": "FLASH_ATTN"}) == "CUDA graphs, attention FLASH_ATTN"
    assert describe({"max_num_seqs": 64, "cached_tokens_reported": True}) == "max 64 sequences"
    assert describe({"cached_tokens_reported": False}) == "cached tokens not reported"
    assert describe({"cached_tokens_reported": None}) == ""


def test_describe_of_vllm_and_sglang_settings() -> None:
    vllm = server_settings({}, VLLM_SERVER_INFO, None, cached_tokens_reported=False)
    assert describe(vllm) == (
        "prefix caching off (block 32), batch-invariant on, eager, attention FLASH_ATTN, max 256 sequences, "
        "tensor parallel 1, cached tokens not reported"
    )
    sglang = server_settings({}, None, SGLANG_INFO, cached_tokens_reported=True)
    assert describe(sglang) == (
        "prefix caching off (block 1), batch-invariant on, CUDA graphs, attention triton, max 48 sequences"
    )


def test_an_empty_label_states_nothing() -> None:
    """Prometheus treats an empty label value as no label: it must not read as "off"."""
    info = info_series('vllm:cache_config_info{block_size="16",enable_prefix_caching=""} 1.0\n')
    assert server_settings(info, None, None, cached_tokens_reported=None)["prefix_caching"] is None


def test_labels_per_line_are_capped_and_timestamps_accepted() -> None:
    labels = ",".join(f'l{i}="v"' for i in range(5000))
    info = info_series(f'x_info{{{labels}}} 1.0\nvllm:cache_config_info{{block_size="16"}} 1.0 1700000000000\n')
    assert len(info["x_info"]) == 64
    assert info["vllm:cache_config_info"] == {"block_size": "16"}


@pytest.mark.parametrize("disabled", [True, False])
def test_tensor_parallel_size_and_its_custom_all_reduce_from_either_engine(disabled: bool) -> None:
    """TP-dependent outputs are an engine axis: a run says how many ranks reduced and whether the engine's
    own all-reduce kernel did it (vLLM: ``parallel_config``; SGLang: ``tp_size``, same flag name)."""
    vllm = {"vllm_config": {"parallel_config": {"tensor_parallel_size": 2, "disable_custom_all_reduce": disabled}}}
    sglang = {"tp_size": 2, "disable_custom_all_reduce": disabled}
    for server_info, sglang_info in ((vllm, None), (None, sglang)):
        settings = server_settings({}, server_info, sglang_info, cached_tokens_reported=None)
        assert settings["tensor_parallel_size"] == 2 and settings["custom_all_reduce"] is (not disabled)
        assert describe(settings) == f"tensor parallel 2 (custom all-reduce {'off' if disabled else 'on'})"
    one_rank = {"vllm_config": {"parallel_config": {"tensor_parallel_size": 1, "disable_custom_all_reduce": disabled}}}
    alone = server_settings({}, one_rank, None, cached_tokens_reported=None)
    assert alone["custom_all_reduce"] is (not disabled) and describe(alone) == "tensor parallel 1"  # nothing reduced
    not_stated = {
        "vllm_config": {"parallel_config": {"tensor_parallel_size": "two", "disable_custom_all_reduce": "maybe"}}
    }
    settings = server_settings({}, not_stated, None, cached_tokens_reported=None)
    assert settings["tensor_parallel_size"] is None and settings["custom_all_reduce"] is None
