"""Prefill and decode roles inside the scheduler: the KV a prefill hands over, and a decode from it.

A prefill leg (``hand_over``) delivers the prompt's KV as its prefill step left it; a decode leg (``handed``)
loads it and decodes without recomputing the prompt. Same settings and a prefill alone: the KV is bitwise the
decoder's own and so is the answer. Other kernel settings, or a prefill batched with other prompts: the KV
really differs, and the decoder's answer with it. Also: ``kv_transfer_params`` parsing (loadgen/engine/handoff.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.engine.handoff import KVTransfer, RemotePrefill, parse_kv_transfer, prefill_answer_params
from loadgen.engine.kvwire import HandedKV
from loadgen.engine.prompts import D3_SHORT_PROMPT
from loadgen.engine.protocol import ApiError
from loadgen.engine.runner import EngineOptions, build_scheduler
from loadgen.engine.sampling import SamplingParams
from loadgen.engine.scheduler import EngineRequest, Scheduler, TokenEvent

WORDS = "the old man sea river house light story night town water boat song morning king".split()
GREEDY = SamplingParams(max_tokens=24, temperature=0, logprobs=3)
PREFILL_LEG = SamplingParams(max_tokens=1, temperature=0, logprobs=3)  # what the router sends the prefill server


def _run(sched: Scheduler, req: EngineRequest) -> tuple[list[TokenEvent], HandedKV | None, list[int]]:
    """``req`` to completion; its events, the KV it handed over (if asked), the batch size of each of its steps."""
    sched.add(req)
    events: list[TokenEvent] = []
    handed: HandedKV | None = None
    sizes: list[int] = []
    while sched.has_work:
        for d in sched.step():
            if d.request_id == req.request_id:
                events += d.events
                handed = handed or d.handed
                sizes.append(d.batch_size)
    return events, handed, sizes


def _prefill(sched: Scheduler, ids: list[int]) -> HandedKV:
    _, handed, _ = _run(sched, EngineRequest("p", ids, PREFILL_LEG, hand_over=True))
    assert handed is not None
    return handed


def _numerics(events: list[TokenEvent]) -> list[tuple[int, float | None, tuple[tuple[int, float], ...]]]:
    return [(e.token_id, e.logprob, e.top) for e in events]


def _same_bits(a: HandedKV, b: HandedKV) -> bool:
    return a.k.tobytes() == b.k.tobytes() and a.v.tobytes() == b.v.tobytes()


@pytest.fixture(scope="module")
def three() -> tuple[Scheduler, Scheduler, Scheduler]:
    """A prefill server, a decode server (both default kernels) and a batch-invariant prefill server."""
    opts = EngineOptions(enable_prefix_caching=False)
    return build_scheduler(opts), build_scheduler(opts), build_scheduler(EngineOptions(batch_invariant=True))


@settings(max_examples=12, deadline=None)
@given(words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=60))
def test_a_same_settings_prefill_alone_hands_over_the_decoders_own_kv_and_answer(
    three: tuple[Scheduler, Scheduler, Scheduler], words: list[str]
) -> None:
    prefiller, decoder, _ = three
    ids = decoder.tokenizer.encode(" ".join(words))
    handed = _prefill(prefiller, ids)
    _run(decoder, EngineRequest("other", decoder.tokenizer.encode("a song " * 40), GREEDY))  # another KV in the slot
    from_kv, _, sizes = _run(decoder, EngineRequest("d", ids, GREEDY, handed=handed))
    own, _, _ = _run(decoder, EngineRequest("own", ids, GREEDY))
    assert _numerics(from_kv) == _numerics(own)
    assert _same_bits(handed, _prefill(decoder, ids))  # the decoder's own prefill, alone
    assert sizes[0] == handed.batch_size == 1  # the prefill step's batch, then one entry per decode step


def test_a_foreign_kernel_prefill_makes_another_kv_and_another_answer(
    three: tuple[Scheduler, Scheduler, Scheduler],
) -> None:
    """A batch-invariant prefiller reduces in one fixed order; the default decoder's own prefill of 24 rows splits
    K: the KV differs in its low bits, and the decoder, decoding from it, answers differently; also with the first
    token (and its logprobs) of its own prefill, so the difference is the KV's."""
    _, decoder, invariant = three
    ids = decoder.tokenizer.encode(D3_SHORT_PROMPT)
    foreign, own_kv = _prefill(invariant, ids), _prefill(decoder, ids)
    assert not _same_bits(foreign, own_kv)
    assert np.abs(foreign.k - own_kv.k).max() < 0.1  # the same computation, rounded differently
    own, _, _ = _run(decoder, EngineRequest("own", ids, GREEDY))
    from_foreign, _, _ = _run(decoder, EngineRequest("d", ids, GREEDY, handed=foreign))
    assert _numerics(from_foreign) != _numerics(own)
    foreign_kv_only = dataclasses.replace(
        foreign, first_token=own_kv.first_token, first_logprob=own_kv.first_logprob, first_top=own_kv.first_top
    )
    kv_only, _, _ = _run(decoder, EngineRequest("d", ids, GREEDY, handed=foreign_kv_only))
    assert _numerics(kv_only)[0] == _numerics(own)[0] and _numerics(kv_only) != _numerics(own)


def test_a_long_prompt_is_reduced_in_one_order_either_way(three: tuple[Scheduler, Scheduler, Scheduler]) -> None:
    """Control: a prefill of 400 rows fills the pretend GPU with one split everywhere, the batch-invariant order:
    the foreign prefiller's KV is then bitwise the decoder's own. The difference above is the split, not the
    transfer."""
    _, decoder, invariant = three
    ids = decoder.tokenizer.encode(" ".join(WORDS * 27))[:400]
    assert _same_bits(_prefill(invariant, ids), _prefill(decoder, ids))


def test_a_prefill_batched_with_other_prompts_hands_over_another_kv(
    three: tuple[Scheduler, Scheduler, Scheduler],
) -> None:
    prefiller, decoder, _ = three
    ids = decoder.tokenizer.encode(D3_SHORT_PROMPT)
    alone = _prefill(prefiller, ids)
    for i in range(5):
        other = prefiller.tokenizer.encode(" ".join(WORDS[i : i + 6]))
        prefiller.add(EngineRequest(f"bg{i}", other, SamplingParams(max_tokens=4, temperature=0)))
    _, handed, sizes = _run(prefiller, EngineRequest("p", ids, PREFILL_LEG, hand_over=True))
    assert handed is not None and sizes == [6] and handed.batch_size == 6
    assert not _same_bits(handed, alone)


def test_a_prompt_finished_by_its_first_token_ends_on_the_decoder_at_once(
    three: tuple[Scheduler, Scheduler, Scheduler],
) -> None:
    prefiller, decoder, _ = three
    ids = decoder.tokenizer.encode(D3_SHORT_PROMPT)
    handed = _prefill(prefiller, ids)
    one = SamplingParams(max_tokens=1, temperature=0, logprobs=3)
    events, _, _ = _run(decoder, EngineRequest("d", ids, one, handed=handed))
    assert [(e.token_id, e.finish_reason) for e in events] == [(handed.first_token, "length")]
    assert decoder.kv.used == 0 and not decoder.running


def test_received_blocks_stay_in_the_decoders_prefix_cache() -> None:
    """As vLLM keeps the blocks it received: a later plain request for the prompt hits them, foreign as they are,
    and answers otherwise than the same hit on the decoder's own block."""
    decoder, own = build_scheduler(EngineOptions()), build_scheduler(EngineOptions())
    ids = decoder.tokenizer.encode(D3_SHORT_PROMPT)  # 24 tokens: one full block
    _run(
        decoder,
        EngineRequest("d", ids, GREEDY, handed=_prefill(build_scheduler(EngineOptions(batch_invariant=True)), ids)),
    )
    assert len(decoder.prefix_cache) == 1
    after, _, _ = _run(decoder, EngineRequest("after", ids, GREEDY))
    assert decoder.prefix_cache.stats.hits_tokens == 16
    _run(own, EngineRequest("warm", ids, SamplingParams(max_tokens=1, temperature=0)))
    own_hit, _, _ = _run(own, EngineRequest("own-hit", ids, GREEDY))
    assert own.prefix_cache.stats.hits_tokens == 16
    assert _numerics(after) != _numerics(own_hit)


def test_a_recomputing_decoder_loads_all_but_the_last_prompt_token_and_samples_the_first_token_itself(
    three: tuple[Scheduler, Scheduler, Scheduler],
) -> None:
    """``recompute_last``, vLLM's decode server: the last prompt position's KV and the prefill step's token are
    not used (tampering with them changes nothing); the last prompt token is a one-row prefill here, which rounds
    otherwise than the decoder's own 24-row prefill, so even its own KV reloaded answers differently (vLLM's
    "own reload"); and the positions before it are the handed-over ones (a foreign KV moves the answer)."""
    prefiller, colocated, invariant = three
    decoder = build_scheduler(EngineOptions(enable_prefix_caching=False, recompute_last=True))
    ids = decoder.tokenizer.encode(D3_SHORT_PROMPT)
    handed = _prefill(prefiller, ids)
    k, v = handed.k.copy(), handed.v.copy()
    k[:, :, -1], v[:, :, -1] = 0.0, 0.0
    tampered = dataclasses.replace(handed, k=k, v=v, first_token=(handed.first_token + 1) % 4303, batch_size=9)
    reloaded, _, sizes = _run(decoder, EngineRequest("d", ids, GREEDY, handed=handed))
    assert _numerics(_run(decoder, EngineRequest("t", ids, GREEDY, handed=tampered))[0]) == _numerics(reloaded)
    assert sizes[0] == 1  # the first token's step is this server's one-row prefill, alone
    own, _, _ = _run(colocated, EngineRequest("own", ids, GREEDY))
    assert _numerics(reloaded) != _numerics(own)
    from_foreign, _, _ = _run(decoder, EngineRequest("f", ids, GREEDY, handed=_prefill(invariant, ids)))
    assert _numerics(from_foreign) != _numerics(reloaded)


def _params(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": [0, 1],
        "remote_engine_id": "loadgen-x",
        "remote_request_id": "cmpl-1",
        "remote_host": "127.0.0.1",
        "remote_port": 8100,
        "tp_size": 1,
    }
    return base | kw


def test_kv_transfer_params_in_vllms_names() -> None:
    assert parse_kv_transfer(None) is None
    assert parse_kv_transfer({"do_remote_decode": False, "do_remote_prefill": False}) is None
    router_prefill_leg = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None}
    assert parse_kv_transfer(router_prefill_leg) == KVTransfer(hand_over=True)
    remote = RemotePrefill("127.0.0.1", 8100, "loadgen-x", "cmpl-1", (0, 1))
    assert parse_kv_transfer(_params()) == KVTransfer(fetch_from=remote)
    answer = prefill_answer_params("loadgen-x", "cmpl-1", "127.0.0.1", 8100, 17)
    assert parse_kv_transfer(answer) == KVTransfer(fetch_from=remote)  # what a prefill answers, a decoder reads


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("yes", "kv_transfer_params"),
        (_params(remote_host=None), "kv_transfer_params.remote_host"),
        (_params(remote_port="8100"), "kv_transfer_params.remote_port"),
        (_params(remote_port=70000), "kv_transfer_params.remote_port"),
        (_params(remote_request_id=None), "kv_transfer_params.remote_request_id"),
        (_params(remote_block_ids="0"), "kv_transfer_params.remote_block_ids"),
        (_params(do_remote_decode=True), "kv_transfer_params"),
        (_params(do_remote_prefill="true"), "kv_transfer_params.do_remote_prefill"),
    ],
)
def test_malformed_kv_transfer_params_are_a_400_naming_the_field(value: object, field: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_kv_transfer(value)
    assert err.value.status == 400 and err.value.param == field
