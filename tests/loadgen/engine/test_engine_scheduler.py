"""Continuous batching: admission up to max_num_seqs, aborts, stop rules, prefix-cache accounting."""

from __future__ import annotations

from typing import Any

from loadgen.engine.sampling import SamplingParams
from loadgen.engine.scheduler import EngineRequest, Scheduler, TokenEvent

PROMPTS = [f"the old man {w} saw the river and the sea at night" * (1 + i % 3) for i, w in enumerate("abcdefg")]


def _req(sched: Scheduler, rid: str, prompt: str, **kw: Any) -> EngineRequest:
    params = SamplingParams(**{"max_tokens": 12, "temperature": 0.0, **kw})
    return EngineRequest(rid, sched.tokenizer.encode(prompt), params)


def _drain(sched: Scheduler) -> dict[str, list[TokenEvent]]:
    out: dict[str, list[TokenEvent]] = {}
    while sched.has_work:
        for d in sched.step():
            out.setdefault(d.request_id, []).extend(d.events)
    return out


def test_admission_is_bounded_and_every_request_matches_its_solo_run(drive: Any) -> None:
    sched = drive.fresh(batch_invariant=True, max_num_seqs=3, enable_prefix_caching=False)
    for i, p in enumerate(PROMPTS):
        sched.add(_req(sched, f"r{i}", p, max_tokens=4 + 3 * i))
    out: dict[str, list[TokenEvent]] = {}
    peak = 0
    while sched.has_work:
        for d in sched.step():
            out.setdefault(d.request_id, []).extend(d.events)
        if peak == 0:
            assert len(sched.running) == 3 and len(sched.waiting) == len(PROMPTS) - 3
        peak = max(peak, len(sched.running), sched.kv.used)
    assert peak == 3
    for i, p in enumerate(PROMPTS):
        solo = drive.fresh(batch_invariant=True, enable_prefix_caching=False)
        solo.add(_req(solo, "x", p, max_tokens=4 + 3 * i))
        assert [e.token_id for e in out[f"r{i}"]] == [e.token_id for e in _drain(solo)["x"]]


def test_each_delivery_carries_the_number_of_sequences_its_step_ran(drive: Any) -> None:
    sched = drive.fresh()
    sizes: dict[str, list[int]] = {}

    def step() -> None:
        for d in sched.step():
            sizes.setdefault(d.request_id, []).append(d.batch_size)

    sched.add(_req(sched, "a", PROMPTS[0], max_tokens=2, ignore_eos=True))
    sched.add(_req(sched, "b", PROMPTS[1], max_tokens=3, ignore_eos=True))
    step()  # a and b prefill together
    sched.add(_req(sched, "c", PROMPTS[2], max_tokens=2, ignore_eos=True))
    while sched.has_work:
        step()  # a and b decode beside c's prefill (a ends), then b and c decode their last tokens
    assert sizes == {"a": [2, 3], "b": [2, 3, 2], "c": [3, 2]}


def test_abort_frees_the_slot_for_the_next_waiting_request(drive: Any) -> None:
    sched = drive.fresh(max_num_seqs=1)
    sched.add(_req(sched, "a", PROMPTS[0], max_tokens=50))
    sched.add(_req(sched, "b", PROMPTS[1]))
    sched.add(_req(sched, "c", PROMPTS[2]))
    sched.step()
    assert list(sched.running) == ["a"]
    assert sched.abort("c") and [r.request_id for r in sched.waiting] == ["b"]
    assert sched.abort("a") and not sched.running and sched.kv.used == 0
    assert not sched.abort("a")
    out = _drain(sched)
    assert set(out) == {"b"} and out["b"][-1].finish_reason == "length" and len(out["b"]) == 12


def test_stop_string_and_stop_token_end_the_request(drive: Any) -> None:
    sched = drive.fresh()
    sched.add(_req(sched, "free", PROMPTS[0], max_tokens=20))
    free = _drain(sched)["free"]
    text = "".join(e.text for e in free)
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    sched.add(_req(sched, "s", PROMPTS[0], max_tokens=20, stop=(stop,)))
    stopped = _drain(sched)["s"]
    assert "".join(e.text for e in stopped) == text[: text.find(stop)]
    assert (stopped[-1].finish_reason, stopped[-1].stop_reason) == ("stop", stop)
    third = free[2].token_id
    sched.add(_req(sched, "t", PROMPTS[0], max_tokens=20, stop_token_ids=(third,)))
    by_id = _drain(sched)["t"]
    first_at = [e.token_id for e in free].index(third)
    assert len(by_id) == first_at + 1 and (by_id[-1].finish_reason, by_id[-1].stop_reason) == ("stop", third)


def test_prefix_cache_counts_tokens_and_never_covers_the_last_prompt_token(drive: Any) -> None:
    sched = drive.fresh()
    ids = list(range(100, 132))  # exactly two blocks
    for rid in ("a", "b"):
        sched.add(EngineRequest(rid, ids, SamplingParams(max_tokens=2, temperature=0)))
        _drain(sched)
    stats = sched.prefix_cache.stats
    assert (stats.queries_tokens, stats.hits_tokens) == (64, 16)
    salted = EngineRequest("c", ids, SamplingParams(max_tokens=2, temperature=0), cache_salt="tenant")
    sched.add(salted)
    _drain(sched)
    assert stats.hits_tokens == 16


def test_prefix_cache_evicts_least_recently_used(drive: Any) -> None:
    sched = drive.fresh(prefix_cache_blocks=1)
    first, second = list(range(200, 217)), list(range(300, 317))
    for rid, ids in (("a", first), ("b", second), ("c", first)):
        sched.add(EngineRequest(rid, ids, SamplingParams(max_tokens=1, temperature=0)))
        _drain(sched)
    assert sched.prefix_cache.stats.hits_tokens == 0 and len(sched.prefix_cache) == 1


def test_seeded_sampling_is_reproducible(drive: Any) -> None:
    runs = []
    for seed in (1, 1, 2):
        sched = drive.fresh()
        sched.add(_req(sched, "r", PROMPTS[0], max_tokens=16, temperature=1.0, seed=seed))
        runs.append([e.token_id for e in _drain(sched)["r"]])
    assert runs[0] == runs[1] != runs[2]
