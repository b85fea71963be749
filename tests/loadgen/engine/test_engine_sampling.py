"""Seeded sampling as vLLM's sampler does it, and what a seeded draw depends on, through the scheduler itself.

vLLM's order is temperature, min_p, top_k, top_p, then an exponential race with the request's own generator: a
seeded draw depends on its logits and its seed only. With ``--batch-invariant`` the logits do not depend on the
batch, so a seeded sampled request gives the same tokens alone and beside others (a property over seeds and
batch shapes); in the default mode its logits move under load, and with them, for some seed, its draw.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.engine.kernels import F32, log_softmax
from loadgen.engine.runner import EngineOptions, build_scheduler
from loadgen.engine.sampling import SamplingParams, filtered_probs, sample_row
from loadgen.engine.scheduler import EngineRequest, Scheduler

VOCAB = 257


def _logits(seed: int) -> F32:
    return np.random.default_rng(seed).normal(0.0, 3.0, VOCAB).astype(np.float32)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    temperature=st.floats(0.05, 2.0),
    top_k=st.integers(0, 40),
    top_p=st.floats(0.01, 1.0),
    min_p=st.floats(0.0, 0.5),
)
def test_filters_keep_what_each_of_vllms_rules_allows_and_the_top_token_always(
    seed: int, temperature: float, top_k: int, top_p: float, min_p: float
) -> None:
    logits = _logits(seed)
    params = SamplingParams(max_tokens=1, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    probs = filtered_probs(logits, params)
    kept = probs > 0
    assert kept[int(np.argmax(logits))] and abs(float(probs.sum()) - 1.0) < 1e-5
    scaled = np.exp(log_softmax((logits / np.float32(temperature)).astype(np.float32)[None, :])[0])
    assert (scaled[kept] >= scaled.max() * np.float32(min_p) * (1 - 1e-6)).all()  # min_p before the others
    if top_k:
        assert kept.sum() <= top_k  # no ties in continuous logits
        assert logits[kept].min() >= np.sort(logits)[-top_k]
    before_top_p = filtered_probs(logits, replace(params, top_p=1.0))
    assert float(before_top_p[(before_top_p > 0) & ~kept].sum()) <= 1.0 - top_p + 1e-5  # top_p drops at most 1-p
    draw = sample_row(logits, params, np.random.default_rng(seed))
    again = sample_row(logits, params, np.random.default_rng(seed))
    assert draw == again and kept[draw.token_id]  # a seeded draw is its logits' and its seed's, and allowed


def _sampled(seed: int, max_tokens: int = 12) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=1.0, top_p=0.95, seed=seed, ignore_eos=True, logprobs=0)


def _run(sched: Scheduler, canary: list[int], params: SamplingParams, others: int, shape_seed: int) -> list[int]:
    """The canary's tokens, sent after ``others`` requests (varied prompts and lengths, some sampled unseeded)
    were added, with steps between some of them, as ``generate_in_batch`` does."""
    rnd = random.Random(shape_seed)
    for i in range(others):
        prompt = [rnd.randrange(300, 4000) for _ in range(rnd.randint(2, 60))]
        temperature = rnd.choice([0.0, 0.8])  # unseeded sampled requests draw from the shared generator
        bg = SamplingParams(max_tokens=rnd.randint(1, 20), temperature=temperature, ignore_eos=True)
        sched.add(EngineRequest(f"bg{i}", prompt, bg))
        if rnd.random() < 0.3:
            sched.step()
    sched.add(EngineRequest("canary", canary, params))
    tokens: list[int] = []
    while sched.has_work:
        for d in sched.step():
            if d.request_id == "canary":
                tokens.extend(e.token_id for e in d.events)
    return tokens


CANARY = [int(t) for t in np.random.default_rng(5).integers(300, 4000, 30)]


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**62), others=st.integers(1, 12), shape_seed=st.integers(0, 2**16))
def test_batch_invariant_a_seeded_sample_is_the_same_alone_and_beside_others(
    seed: int, others: int, shape_seed: int
) -> None:
    opts = EngineOptions(batch_invariant=True, enable_prefix_caching=False, max_num_seqs=16)
    alone = _run(build_scheduler(opts), CANARY, _sampled(seed), 0, 0)
    beside = _run(build_scheduler(opts), CANARY, _sampled(seed), others, shape_seed)
    assert alone == beside


def test_default_mode_a_seeded_draw_moves_once_its_logits_move_under_load() -> None:
    """Seeds 0.. in turn, each alone and beside eight others on a fresh default engine: the first seed whose
    draw moved is found, and at that seed the batch-invariant engine's draw does not move."""
    moved = None
    for seed in range(40):
        opts = EngineOptions(enable_prefix_caching=False, max_num_seqs=16)
        if _run(build_scheduler(opts), CANARY, _sampled(seed), 0, 0) != _run(
            build_scheduler(opts), CANARY, _sampled(seed), 8, 1
        ):
            moved = seed
            break
    assert moved is not None, "no seed in 0..39 moved under load"
    fixed = EngineOptions(batch_invariant=True, enable_prefix_caching=False, max_num_seqs=16)
    assert _run(build_scheduler(fixed), CANARY, _sampled(moved), 0, 0) == _run(
        build_scheduler(fixed), CANARY, _sampled(moved), 8, 1
    )


def test_a_seeded_request_never_draws_from_the_shared_generator() -> None:
    """Beside seeded requests the engine's shared generator is untouched; an unseeded sampled request advances it."""
    sched = build_scheduler(EngineOptions(enable_prefix_caching=False))
    before = sched.unseeded.bit_generator.state
    _run(sched, CANARY, _sampled(3, max_tokens=4), 0, 0)
    assert sched.unseeded.bit_generator.state == before
    _run(sched, CANARY, SamplingParams(max_tokens=4, temperature=1.0, ignore_eos=True), 0, 0)
    assert sched.unseeded.bit_generator.state != before
