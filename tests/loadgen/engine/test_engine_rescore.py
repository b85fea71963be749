"""``prompt_logprobs``, the teacher-forced re-score, against the decode that produced the ids, through the scheduler.

The known truths: with every path fixed (``--batch-invariant``) the re-score of prompt + output is bitwise the
decode's chosen-token logprobs at every output position, whether the decode ran alone or beside other requests'
prefills. With ``matmul,attention,norm`` fixed and the step kind free, the re-score (a prefill: the prefill kernel,
32-key tiles walked forward, one split) is bitwise the decode run in decode-only steps (the decode kernel, the same
order once its split is fixed), and moves from the decode run in mixed steps (the varlen kernel, 16-key tiles walked
back). In the default mode the re-score's lm_head and layers reduce over the whole sequence's rows, and it moves.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.engine.kernels import log_softmax
from loadgen.engine.model import Segment
from loadgen.engine.plan import InvariantPaths
from loadgen.engine.runner import EngineOptions, build_scheduler
from loadgen.engine.sampling import PositionLogprobs, SamplingParams
from loadgen.engine.scheduler import EngineRequest

VLLM_INVARIANT = InvariantPaths.named("matmul,attention,norm")


def _decode(
    paths: InvariantPaths, prompt: list[int], max_tokens: int, intruders: bool
) -> tuple[list[int], list[float]]:
    """A greedy decode with its chosen-token logprobs; ``intruders``: another request's 40-token prefill joins every
    step, so each decode step is a mixed one."""
    sched = build_scheduler(EngineOptions(paths=paths, max_num_seqs=max_tokens + 2))
    params = SamplingParams(max_tokens=max_tokens, temperature=0, logprobs=0, ignore_eos=True)
    sched.add(EngineRequest("canary", prompt, params))
    tokens: list[int] = []
    logprobs: list[float] = []
    step = 0
    while sched.has_work:
        if intruders and step < max_tokens:
            sched.add(EngineRequest(f"p{step}", list(range(600 + step, 640 + step)), SamplingParams(max_tokens=1)))
        step += 1
        for d in sched.step():
            if d.request_id == "canary":
                tokens += [e.token_id for e in d.events]
                logprobs += [e.logprob for e in d.events if e.logprob is not None]
    return tokens, logprobs


def _rescore(paths: InvariantPaths, ids: list[int], k: int = 0) -> tuple[PositionLogprobs, ...]:
    sched = build_scheduler(EngineOptions(paths=paths))
    sched.add(EngineRequest("rescore", ids, SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=k)))
    while sched.has_work:
        for d in sched.step():
            if d.prompt_logprobs is not None:
                return d.prompt_logprobs
    raise AssertionError("the prefill step delivered no prompt_logprobs")


def _prompt(seed: int, n: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(300, 4000, n)]


def _bits(values: list[float]) -> bytes:
    return np.array(values, dtype=np.float32).tobytes()


shapes = {"seed": st.integers(0, 2**16), "length": st.integers(2, 70), "max_tokens": st.integers(1, 24)}


@settings(max_examples=12, deadline=None)
@given(**shapes)
def test_batch_invariant_the_rescore_is_the_decodes_logprobs_bitwise(seed: int, length: int, max_tokens: int) -> None:
    paths = InvariantPaths.all(True)
    prompt = _prompt(seed, length)
    tokens, logprobs = _decode(paths, prompt, max_tokens, intruders=False)
    rescored = _rescore(paths, prompt + tokens)[length - 1 :]
    assert [p.token_id for p in rescored] == tokens
    assert _bits([p.logprob for p in rescored]) == _bits(logprobs)
    mixed_tokens, mixed_logprobs = _decode(paths, prompt, max_tokens, intruders=True)
    assert mixed_tokens == tokens and _bits(mixed_logprobs) == _bits(logprobs)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**16), length=st.integers(17, 70), max_tokens=st.integers(4, 16))
def test_with_the_step_kind_free_the_rescore_is_the_decode_only_decode_not_the_mixed_one(
    seed: int, length: int, max_tokens: int
) -> None:
    prompt = _prompt(seed, length)
    tokens, logprobs = _decode(VLLM_INVARIANT, prompt, max_tokens, intruders=False)
    rescored = _rescore(VLLM_INVARIANT, prompt + tokens)[length - 1 :]
    assert [p.token_id for p in rescored] == tokens and _bits([p.logprob for p in rescored]) == _bits(logprobs)
    mixed_tokens, mixed_logprobs = _decode(VLLM_INVARIANT, prompt, max_tokens, intruders=True)
    # the first token comes from the prefill step either way; every later one from a decode row in a mixed step
    assert (mixed_tokens, _bits(mixed_logprobs[1:])) != (tokens, _bits(logprobs[1:]))


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**16), length=st.integers(17, 70))
def test_in_the_default_mode_the_rescore_moves_from_the_decode(seed: int, length: int) -> None:
    paths = InvariantPaths.all(False)
    prompt = _prompt(seed, length)
    tokens, logprobs = _decode(paths, prompt, 8, intruders=False)
    rescored = _rescore(paths, prompt + tokens)[length - 1 :]
    assert _bits([p.logprob for p in rescored]) != _bits(logprobs)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), length=st.integers(2, 40), k=st.integers(0, 20))
def test_each_position_scores_its_given_token_with_its_rank_and_the_top_k(seed: int, length: int, k: int) -> None:
    """Position i's entry is row i-1's log-softmax at prompt token i: rank counts the tokens at least as likely."""
    paths = InvariantPaths.all(True)
    ids = _prompt(seed, length)
    rescored = _rescore(paths, ids, k)
    assert [p.token_id for p in rescored] == ids[1:]
    sched = build_scheduler(EngineOptions(paths=paths))
    _, every = sched.model.forward_rows([Segment(0, ids, 0, True, True)])
    rows = every[0]
    assert rows is not None and rows.shape[0] == length - 1
    lp = log_softmax(rows)
    for i, pos in enumerate(rescored):
        assert pos.logprob == float(lp[i, ids[i + 1]])
        assert pos.rank == int((lp[i] >= lp[i, ids[i + 1]]).sum()) >= 1
        assert len(pos.top) == k and [t for t, _ in pos.top] == list(np.argsort(-lp[i], kind="stable")[:k])


def test_a_rescore_skips_the_prefix_cache_and_computes_every_position() -> None:
    sched = build_scheduler(EngineOptions(batch_invariant=True))
    ids = _prompt(1, 40)
    for name in ("warm", "again"):
        sched.add(EngineRequest(name, ids, SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=1)))
        while sched.has_work:
            for d in sched.step():
                assert d.cached_tokens == 0 and d.prompt_logprobs is not None and len(d.prompt_logprobs) == 39
