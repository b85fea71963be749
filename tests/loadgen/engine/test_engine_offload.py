"""The offload tier itself (loadgen/engine/offload.py) and the scheduler's lookup through it: what a reload gives back
at each stored dtype, the LRU by bytes, and the sources a request's first step row tells."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from loadgen.core.steptrace import FILE_GLOB
from loadgen.engine.kernels import to_bf16
from loadgen.engine.kvcache import BLOCK_TOKENS, SlotKV, block_hashes
from loadgen.engine.offload import (
    E4M3_MAX,
    OffloadTier,
    bytes_per_block,
    e4m3_decode,
    e4m3_encode,
    e4m3_round,
    from_fp8,
    to_fp8,
)
from loadgen.engine.runner import EngineOptions, build_scheduler
from loadgen.engine.sampling import SamplingParams
from loadgen.engine.scheduler import EngineRequest, Scheduler
from loadgen.engine.weights import ModelConfig

CFG = ModelConfig(max_model_len=128)
BLOCK_SHAPE = (CFG.n_layers, CFG.n_heads, BLOCK_TOKENS, CFG.head_dim)
PROMPT = " ".join("the old man saw a river near the town at night".split() * 7)  # 77 tokens: 4 usable blocks


def gib(blocks: int, dtype: str = "bf16") -> float:
    return blocks * bytes_per_block(CFG.n_layers, CFG.n_heads, CFG.head_dim, dtype) / (1 << 30)  # type: ignore[arg-type]


def filled_slots(seed: int, slots: int = 2) -> SlotKV:
    """Slots holding bf16 K/V of the range the model writes."""
    kv = SlotKV(CFG, slots)
    rng = np.random.default_rng(seed)
    kv.k[:] = to_bf16(rng.standard_normal(kv.k.shape).astype(np.float32) * 3)
    kv.v[:] = to_bf16(rng.standard_normal(kv.v.shape).astype(np.float32) * 3)
    return kv


def test_bytes_per_block_at_each_dtype() -> None:
    # K and V, 2 layers x 4 heads x 16 tokens x 32: 8192 values; fp8 adds a float32 scale per layer, head, K and V
    assert bytes_per_block(2, 4, 32, "bf16") == 16384
    assert bytes_per_block(2, 4, 32, "fp8") == 8192 + 64
    assert OffloadTier(gib(10), "bf16", 2, 4, 32).capacity_blocks == 10
    assert OffloadTier(gib(10), "fp8", 2, 4, 32).capacity_blocks == 10 * 16384 // 8256  # the same GiB, 19 blocks


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_bf16_store_then_load_is_the_identity(seed: int) -> None:
    kv = filled_slots(seed)
    hashes = block_hashes(list(range(64)), None)
    tier = OffloadTier(gib(8), "bf16", CFG.n_layers, CFG.n_heads, CFG.head_dim)
    tier.store(hashes, kv, 0)
    tier.load(hashes, 0, len(hashes), kv, 1)
    assert np.array_equal(kv.k[:, 1, :, :64].view(np.uint64), kv.k[:, 0, :, :64].view(np.uint64))  # bit for bit
    assert np.array_equal(kv.v[:, 1, :, :64].view(np.uint64), kv.v[:, 0, :, :64].view(np.uint64))
    assert tier.stats.store_bytes == tier.stats.load_bytes == 4 * 16384


def test_an_fp8_reload_differs_from_the_computed_kv_within_e4m3s_error() -> None:
    kv = filled_slots(7)
    hashes = block_hashes(list(range(64)), None)
    tier = OffloadTier(gib(8, "fp8"), "fp8", CFG.n_layers, CFG.n_heads, CFG.head_dim)
    tier.store(hashes, kv, 0)
    tier.load(hashes, 0, len(hashes), kv, 1)
    stored, loaded = kv.k[:, 0, :, :64], kv.k[:, 1, :, :64]
    assert not np.array_equal(stored, loaded)
    assert np.array_equal(loaded, to_bf16(loaded.astype(np.float32)))  # reassembled at the slot's dtype: bf16
    blocks = (CFG.n_layers, CFG.n_heads, 4, BLOCK_TOKENS, -1)
    absmax = np.abs(stored).reshape(blocks).max(axis=(3, 4), keepdims=True)
    # half of e4m3's coarsest step (32) at the block's scale, and bf16's own rounding of the reassembled value
    bound = absmax / E4M3_MAX * 16 + np.abs(stored).reshape(blocks) / 128
    err = np.abs(loaded - stored).reshape(blocks)
    assert (err <= bound).all()
    assert tier.stats.store_bytes == 4 * (8192 + 64)


finite = hnp.arrays(
    np.float32,
    st.integers(1, 64),
    elements=st.floats(-E4M3_MAX, E4M3_MAX, width=32, allow_nan=False, allow_infinity=False),
)


@settings(max_examples=200, deadline=None)
@given(finite)
def test_e4m3_rounding_is_idempotent_exact_in_its_codes_and_within_its_relative_error(x: np.ndarray) -> None:
    r = e4m3_round(x)
    assert np.array_equal(e4m3_round(r), r)
    assert np.array_equal(e4m3_decode(e4m3_encode(r)), r)
    normal = np.abs(x) >= 2.0**-6
    assert (np.abs(r - x)[normal] <= np.abs(x)[normal] / 16).all()  # 3 mantissa bits: half an ulp, 2^-4
    assert (np.abs(r - x)[~normal] <= 2.0**-10).all()  # subnormals: a 2^-9 grid


@settings(max_examples=50, deadline=None)
@given(hnp.arrays(np.float32, BLOCK_SHAPE, elements=st.floats(-256, 256, width=32)))
def test_an_fp8_block_comes_back_within_its_heads_scale(block: np.ndarray) -> None:
    """Each layer and head has its own scale (absmax / 448): its values come back within half e4m3's coarsest
    step of that scale, plus bf16's own rounding of the reassembled value."""
    x = to_bf16(block)
    back = from_fp8(to_fp8(x))
    absmax = np.abs(x).max(axis=(2, 3), keepdims=True)
    assert (np.abs(back - x) <= absmax / E4M3_MAX * 16 + np.abs(x) / 128 + 2.0**-12).all()


def test_a_tier_smaller_than_a_prompts_blocks_keeps_the_most_recent() -> None:
    kv = filled_slots(3)
    hashes = block_hashes(list(range(80)), None)  # 5 blocks
    tier = OffloadTier(gib(2), "bf16", CFG.n_layers, CFG.n_heads, CFG.head_dim)
    tier.store(hashes, kv, 0)
    assert [h in tier for h in hashes] == [False, False, False, True, True]
    assert tier.stats.evicted_blocks == 3
    assert tier.match(hashes, 0, 5) == 0  # the chain's head is gone: nothing of it loads
    assert tier.match(hashes, 3, 5) == 2  # past a GPU hit of 3 blocks the tier continues
    tier.reset()
    assert len(tier) == 0


def run(sched: Scheduler, rid: str, prompt_ids: list[int]) -> tuple[list[int], list[float | None], int]:
    sched.add(EngineRequest(rid, prompt_ids, SamplingParams(max_tokens=6, temperature=0, logprobs=1)))
    tokens: list[int] = []
    logprobs: list[float | None] = []
    cached = 0
    while sched.has_work:
        for d in sched.step():
            tokens += [e.token_id for e in d.events]
            logprobs += [e.logprob for e in d.events]
            cached = d.cached_tokens
    return tokens, logprobs, cached


def test_a_lookup_continues_from_the_gpu_hit_into_the_tier_and_the_first_row_says_so(tmp_path: Path) -> None:
    """Computed, a GPU hit, then with the GPU cache dropped the tier; the loaded blocks are GPU hits again after."""
    sched = build_scheduler(EngineOptions(kv_offloading_size=gib(64), step_trace=tmp_path))
    ids = sched.tokenizer.encode(PROMPT)
    usable = (len(ids) - 1) // BLOCK_TOKENS * BLOCK_TOKENS
    computed, local_hit = run(sched, "cmpl-0", ids), run(sched, "cmpl-1", ids)
    sched.prefix_cache.reset()
    tier_hit = run(sched, "cmpl-2", ids)
    again = run(sched, "cmpl-3", ids)
    assert (computed[2], local_hit[2], tier_hit[2], again[2]) == (0, usable, usable, usable)
    assert tier_hit[:2] == local_hit[:2]  # bf16: the same K/V as the GPU hit, the same suffix prefill
    assert (sched.stats.prompt_tokens_local_hit, sched.stats.prompt_tokens_external) == (2 * usable, usable)
    first_rows: dict[str, tuple[int, int, int]] = {}
    (path,) = tmp_path.glob(FILE_GLOB)
    for line in path.read_bytes().splitlines():
        rec = orjson.loads(line)
        for rid, local, external, computed_before in zip(
            rec["ids"], rec["local"], rec["external"], rec["computed"], strict=True
        ):
            first_rows.setdefault(rid, (local, external, computed_before))
            if first_rows[rid] != (local, external, computed_before):
                assert (local, external) == (0, 0)  # every later row
    assert first_rows == {
        "cmpl-0": (0, 0, 0),
        "cmpl-1": (usable, 0, usable),
        "cmpl-2": (0, usable, usable),
        "cmpl-3": (usable, 0, usable),
    }
