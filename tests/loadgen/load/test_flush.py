"""The offload action's flush, its pure parts: how much it sends, in fillers of what length, and when it stops.
The flush against a server, through the real CLI, is ``test_offload_action_e2e.py``'s."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core.errors import EndpointError
from loadgen.core.scenario import parse_scenario
from loadgen.core.wire.server_config import gpu_cache_tokens
from loadgen.load.canary_request import with_external
from loadgen.load.flush import MAX_FAILURES, FlushSize, Sent, fill, filler_prompt
from loadgen.runs.cache_size import check_cache_size


def _never() -> bool:
    return False


@settings(deadline=None, max_examples=50)
@given(
    cache=st.integers(1, 50_000),
    context=st.one_of(st.none(), st.integers(256, 131_072)),
    per_word=st.floats(1.0, 3.0),
)
def test_a_flush_reaches_its_target_in_fillers_that_fit_the_context(
    cache: int, context: int | None, per_word: float
) -> None:
    size = FlushSize.of(cache, context)
    assert size.target_tokens == math.ceil(1.25 * cache)
    lengths: list[int] = []

    def send(prompt: str) -> Sent:  # an engine whose tokenizer spells each word in per_word tokens
        lengths.append(math.ceil(per_word * len(prompt.split())))
        return Sent(lengths[-1], True)

    total = fill(size, random.Random(0), send, _never)
    assert total == sum(lengths) >= size.target_tokens
    assert total - lengths[-1] < size.target_tokens  # it stops at the first filler that reaches the target
    if context is not None and size.filler_tokens > 16:
        assert max(lengths) <= context  # the first filler is half as long in words, the rest sized by the count


def test_fillers_are_distinct_and_failures_shrink_them_then_end_the_flush() -> None:
    rng = random.Random(3)
    prompts = {filler_prompt(rng, 32) for _ in range(200)}
    assert len(prompts) == 200 and all(len(p.split()) == 32 for p in prompts)
    asked: list[int] = []

    def refuse(prompt: str) -> Sent | None:
        asked.append(len(prompt.split()))
        return None

    assert fill(FlushSize(10_000, 1024), random.Random(0), refuse, _never) == 0
    assert asked == [512, 256, 128][:MAX_FAILURES]
    uncounted = fill(FlushSize(100, 64), random.Random(0), lambda p: Sent(len(p.split()), False), _never)
    assert uncounted >= 100  # counted by words where the engine says nothing: never short by an estimate
    stops = iter([False, True])
    assert fill(FlushSize(10_000, 64), random.Random(0), lambda p: Sent(40, True), lambda: next(stops)) == 40


def test_the_gpu_cache_size_is_read_from_cache_config_info_or_the_run_refused() -> None:
    info = {"vllm:cache_config_info": {"block_size": "16", "num_gpu_blocks": "1024", "enable_prefix_caching": "True"}}
    assert gpu_cache_tokens(info) == 16_384
    for blocks in ("None", "0", "x"):
        assert gpu_cache_tokens({"vllm:cache_config_info": {"block_size": "16", "num_gpu_blocks": blocks}}) is None
    offload = parse_scenario({"canaries": [{"prompt": "hi", "cache": "offload"}]}, "s.toml")
    plain = parse_scenario({"canaries": [{"prompt": "hi", "cache": "reset"}]}, "s.toml")
    assert check_cache_size(offload, info, "http://h:1/metrics") == 16_384
    assert check_cache_size(plain, {}, "http://h:1/metrics") is None
    with pytest.raises(EndpointError) as err:
        check_cache_size(offload, {"vllm:cache_config_info": {"block_size": "16"}}, "http://h:1/metrics")
    assert str(err.value).startswith("http://h:1/metrics: canary 'canary' has cache = \"offload\"")
    assert "vllm:cache_config_info states no num_gpu_blocks" in str(err.value)


def test_a_reset_that_must_empty_the_tier_asks_for_it_in_the_query() -> None:
    assert with_external("/reset_prefix_cache") == "/reset_prefix_cache?reset_external=true"
    assert with_external("/x?a=1") == "/x?a=1&reset_external=true"
