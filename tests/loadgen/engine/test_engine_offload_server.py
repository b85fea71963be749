"""The offload tier through real engine processes: a prompt computed, then with the GPU prefix cache reset
answered from the tier, as /metrics (read by the collectors' own parser), the step trace and the answers say."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from collectors.engine_metrics import EngineGauges, parse_metrics
from loadgen.core.steptrace import FILE_GLOB
from loadgen.engine.kvcache import BLOCK_TOKENS
from tests.loadgen.engine.engine_http import post

PROMPT = " ".join(["the old man saw a river near the town"] * 8)
BF16_BLOCK, FP8_BLOCK = 16384, 8256  # bytes of one block's K and V at each dtype (2 layers, 4 heads, 32 dims)
Engine = Callable[..., AbstractContextManager[tuple[str, Any]]]


@dataclass(frozen=True)
class Answer:
    text: str
    logprobs: list[float]
    prompt_tokens: int
    cached: int


def complete(url: str, prompt: str = PROMPT, **extra: Any) -> tuple[Answer, dict[str, Any]]:
    body = {"model": "loadgen-tiny", "prompt": prompt, "max_tokens": 6, "temperature": 0, "logprobs": 1, **extra}
    status, raw = post(url + "/v1/completions", body)
    assert status == 200, raw
    got = json.loads(raw)
    usage = got["usage"]
    choice = got["choices"][0]
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    answer = Answer(choice["text"], choice["logprobs"]["token_logprobs"], usage["prompt_tokens"], cached)
    return answer, got


def reset(url: str, query: str = "") -> None:
    status, raw = post(url + "/reset_prefix_cache" + query, {})
    assert (status, json.loads(raw)) == (200, {"success": True})


def scrape(url: str) -> tuple[EngineGauges, dict[str, str]]:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    info = next(f for f in text_string_to_metric_families(text) if f.name == "vllm:cache_config_info")
    return parse_metrics(text), info.samples[0].labels


def first_rows(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Each request's first step row: (local, external, computed before the step); every later row is 0, 0."""
    rows: dict[str, tuple[int, int, int]] = {}
    for path in folder.glob(FILE_GLOB):
        for line in path.read_bytes().splitlines():
            rec = orjson.loads(line)
            for rid, local, external, computed in zip(
                rec["ids"], rec["local"], rec["external"], rec["computed"], strict=True
            ):
                if rid in rows:
                    assert (local, external) == (0, 0)
                else:
                    rows[rid] = (local, external, computed)
    return rows


def rows_of(folder: Path, got: dict[str, Any]) -> tuple[int, int, int]:
    key = got["id"].removeprefix("cmpl-")
    (row,) = [v for rid, v in first_rows(folder).items() if key in rid]
    return row


@pytest.fixture(scope="module", params=["bf16", "fp8"])
def tiered(
    request: pytest.FixtureRequest, engine_process: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, Path]]:
    folder = tmp_path_factory.mktemp(f"trace-{request.param}")
    flags = ("--kv-offloading-size", "0.01", "--kv-offloading-dtype", request.param, "--step-trace", str(folder))
    with engine_process(*flags) as (url, _proc):
        yield url, request.param, folder


def test_a_prompt_dropped_from_the_gpu_comes_back_from_the_tier(tiered: tuple[str, str, Path]) -> None:
    url, dtype, folder = tiered
    block = BF16_BLOCK if dtype == "bf16" else FP8_BLOCK
    computed, got0 = complete(url)
    local_hit, got1 = complete(url)
    usable = (computed.prompt_tokens - 1) // BLOCK_TOKENS * BLOCK_TOKENS
    before, info = scrape(url)
    assert (info["kv_offloading_size"], info["kv_offloading_backend"], info["num_gpu_blocks"]) == (
        "0.01",
        "native",
        "1024",
    )
    assert (before["offload_store_bytes"], before["offload_load_bytes"]) == (usable // BLOCK_TOKENS * block, 0)
    reset(url)  # the GPU prefix cache only
    from_tier, got2 = complete(url)
    after, _ = scrape(url)
    assert (computed.cached, local_hit.cached, from_tier.cached) == (0, usable, usable)
    assert (before["tokens_external"], after["tokens_external"]) == (0, usable)
    assert after["tokens_local_hit"] == before["tokens_local_hit"] == usable
    assert after["offload_load_bytes"] == usable // BLOCK_TOKENS * block
    assert after["offload_store_bytes"] == before["offload_store_bytes"]  # its blocks were stored already
    assert after["prompt_tokens_cached"] == 2 * usable
    assert rows_of(folder, got0) == (0, 0, 0)
    assert rows_of(folder, got1) == (usable, 0, usable)
    assert rows_of(folder, got2) == (0, usable, usable)
    if dtype == "bf16":  # an exact copy: the same K/V as the GPU hit, the same suffix prefill, the same answer
        assert (from_tier.text, from_tier.logprobs) == (local_hit.text, local_hit.logprobs)
    else:  # reassembled from e4m3: the reload moved the numerics
        assert from_tier.logprobs != local_hit.logprobs
    reset(url, "?reset_external=true")
    again, got3 = complete(url)
    final, _ = scrape(url)
    assert again.cached == 0 and rows_of(folder, got3) == (0, 0, 0)
    assert (again.text, again.logprobs) == (computed.text, computed.logprobs)  # computed again, as the first
    assert (
        final["tokens_external"] == after["tokens_external"]
        and final["offload_load_bytes"] == after["offload_load_bytes"]
    )
    n = computed.prompt_tokens
    assert (after["tokens_computed"], final["tokens_computed"]) == (n + 2 * (n - usable), 2 * n + 2 * (n - usable))


def test_a_tier_smaller_than_the_prompt_keeps_its_last_blocks_and_loads_nothing(engine_process: Engine) -> None:
    size = 2 * BF16_BLOCK / (1 << 30)  # two blocks: the prompt's four evict their own head
    with engine_process("--kv-offloading-size", repr(size)) as (url, _proc):
        first, _ = complete(url)
        reset(url)
        second, _ = complete(url)
        got, _info = scrape(url)
    assert (first.cached, second.cached) == (0, 0)  # the chain's first blocks were evicted: nothing to continue
    # each computation stored its four blocks again (what was evicted is no longer stored); nothing was loaded
    assert got["offload_store_bytes"] == 2 * 4 * BF16_BLOCK and got["offload_load_bytes"] == 0
    assert got["tokens_external"] == 0 and got["tokens_computed"] == first.prompt_tokens + second.prompt_tokens


def test_a_decoders_handed_over_tokens_count_as_external(engine_process: Engine, tmp_path: Path) -> None:
    """One server its own prefiller (``--kv-peers self``): the prefill leg, the prefix cache reset, the decode leg
    loads the whole prompt's KV from the hand-over. No tier: no offload series, kv_offloading_size "None"."""
    with engine_process("--kv-peers", "self", "--step-trace", str(tmp_path)) as (url, _proc):
        leg, got = complete(url, max_tokens=1, kv_transfer_params={"do_remote_decode": True})
        reset(url)
        before, _ = scrape(url)
        decoded, got_d = complete(url, kv_transfer_params=got["kv_transfer_params"])
        after, info = scrape(url)
    n = leg.prompt_tokens
    assert decoded.cached == n
    assert (before["tokens_external"], after["tokens_external"]) == (0, n)
    assert after["tokens_computed"] == before["tokens_computed"] == n  # only the prefill leg computed
    assert rows_of(tmp_path, got_d) == (0, n, n)  # its first row: a decode of a KV loaded from outside
    assert after["offload_store_bytes"] is None and info["kv_offloading_size"] == "None"


def test_reset_external_must_be_a_boolean(engine_process: Engine) -> None:
    with engine_process() as (url, _proc):
        status, raw = post(url + "/reset_prefix_cache?reset_external=maybe", {})
    assert status == 400 and json.loads(raw)["error"]["param"] == "reset_external"
