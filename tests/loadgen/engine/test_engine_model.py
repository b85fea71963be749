"""Batch and cache (in)variance of the whole model, attributed to the reduction path responsible."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.engine.plan import InvariantPaths
from loadgen.engine.prompts import CACHE_SENSITIVE_PROMPTS, CURVE_CANARY, D3_LONG_PROMPT, D3_SHORT_PROMPT

# The reduction paths that must be fixed (and suffice) to make cache hit and miss bitwise equal.
CAUSE = {
    # hit prefills 8 (9) rows, miss 24 (25): the GEMMs split K differently
    CACHE_SENSITIVE_PROMPTS[0]: {"matmul"},
    CACHE_SENSITIVE_PROMPTS[1]: {"matmul"},
    # hit leaves one row: it runs as a decode row, with split-KV attention and 1-row GEMM splits
    CACHE_SENSITIVE_PROMPTS[2]: {"matmul", "attention"},
    CACHE_SENSITIVE_PROMPTS[3]: {"matmul", "attention"},
}


def test_invariant_mode_is_bitwise_equal_alone_and_in_batches_of_1_to_64(drive: Any) -> None:
    alone = drive.generate_in_batch(drive.fresh(batch_invariant=True), CURVE_CANARY, 0, seed=0, max_tokens=6)
    sched = drive.fresh(batch_invariant=True, max_num_seqs=64)
    for others in range(64):
        got = drive.generate_in_batch(sched, CURVE_CANARY, others, seed=others, max_tokens=6, bg_tokens=8, bg_words=10)
        assert got.numerics() == alone.numerics(), f"batch of {others + 1} changed the canary's logprobs"


def test_default_mode_differs_in_some_batches_but_alone_matches_itself(drive: Any) -> None:
    alone = drive.generate_in_batch(drive.fresh(), CURVE_CANARY, others=0, seed=0)
    assert drive.generate_in_batch(drive.fresh(), CURVE_CANARY, others=0, seed=1) == alone
    differing = [
        n for n in (4, 16, 31, 48, 63) if drive.generate_in_batch(drive.fresh(), CURVE_CANARY, n, seed=n) != alone
    ]
    assert differing, "default mode never changed a logprob under load"


@pytest.mark.parametrize("prompt", [*CACHE_SENSITIVE_PROMPTS, D3_LONG_PROMPT])
def test_invariant_mode_cache_hit_equals_miss_bitwise(prompt: str, drive: Any) -> None:
    sched = drive.fresh(batch_invariant=True)
    miss, hit = drive.generate(sched, prompt), drive.generate(sched, prompt)
    assert miss.cached_tokens == 0 and hit.cached_tokens > 0
    assert hit.numerics() == miss.numerics()


@pytest.mark.parametrize("prompt", CACHE_SENSITIVE_PROMPTS)
def test_default_mode_cache_hit_differs_and_the_cause_is_one_reduction_path(prompt: str, drive: Any) -> None:
    sched = drive.fresh()
    miss, hit, again = drive.generate(sched, prompt), drive.generate(sched, prompt), drive.generate(sched, prompt)
    assert miss.token_ids != hit.token_ids
    assert again == hit, "two cache hits must agree: same shapes, same order"
    cause = CAUSE[prompt]
    for fixed in [cause, *({p} for p in ("matmul", "attention", "norm") if {p} != cause)]:
        sched = drive.fresh(paths=InvariantPaths(**dict.fromkeys(fixed, True)))
        m, h = drive.generate(sched, prompt), drive.generate(sched, prompt)
        assert (m.numerics() == h.numerics()) == (fixed == cause), fixed


def test_default_mode_long_control_prompt_drifts_without_diverging(drive: Any) -> None:
    sched = drive.fresh()
    miss, hit = drive.generate(sched, D3_LONG_PROMPT), drive.generate(sched, D3_LONG_PROMPT)
    assert miss.token_ids == hit.token_ids and miss.logprobs != hit.logprobs


def test_prefix_caching_off_means_no_hits_and_no_divergence(drive: Any) -> None:
    sched = drive.fresh(enable_prefix_caching=False)
    first, second = drive.generate(sched, D3_SHORT_PROMPT), drive.generate(sched, D3_SHORT_PROMPT)
    assert first == second and second.cached_tokens == 0
