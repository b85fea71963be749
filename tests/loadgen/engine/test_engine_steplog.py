"""The embedded engine's step trace, read back from the file the scheduler wrote (loadgen/core/steptrace.py)."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core.steptrace import FILE_GLOB, StepRecord
from loadgen.engine.runner import EngineOptions, build_scheduler
from loadgen.engine.sampling import SamplingParams
from loadgen.engine.scheduler import EngineRequest, Scheduler

WORDS = "the old man saw a river near the town at night and the sea was calm".split()


def _records(folder: Path) -> list[StepRecord]:
    (path,) = folder.glob(FILE_GLOB)
    assert path.name.startswith("engine_steps-embedded-")
    return [StepRecord(**orjson.loads(line)) for line in path.read_bytes().splitlines()]


def _request(sched: Scheduler, rid: str, prompt: str, tokens: int) -> EngineRequest:
    params = SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True)
    return EngineRequest(rid, sched.tokenizer.encode(prompt), params)


def _drain(sched: Scheduler) -> dict[str, int]:
    """Run to the end; the tokens each request got."""
    got: dict[str, int] = {}
    while sched.has_work:
        for d in sched.step():
            got[d.request_id] = got.get(d.request_id, 0) + len(d.events)
    return got


def test_each_step_is_one_line_with_its_decode_and_prefill_rows(tmp_path: Path) -> None:
    sched = build_scheduler(EngineOptions(step_trace=tmp_path))
    a = _request(sched, "cmpl-a", "the old man saw the river", 3)
    b = _request(sched, "cmpl-b", "the sea was calm at night near the town", 2)
    sched.add(a)
    sched.step()  # a's prefill alone
    sched.add(b)
    _drain(sched)  # a decodes beside b's prefill, then both decode, then a alone
    pa, pb = len(a.prompt_ids), len(b.prompt_ids)
    rows = [(r.step, r.ids, r.scheduled, r.computed, r.prompt, r.preempted, r.source) for r in _records(tmp_path)]
    assert rows == [
        (0, ["cmpl-a"], [pa], [0], [pa], [], "embedded"),
        (1, ["cmpl-a", "cmpl-b"], [1, pb], [pa, 0], [pa, pb], [], "embedded"),
        (2, ["cmpl-a", "cmpl-b"], [1, 1], [pa + 1, pb], [pa, pb], [], "embedded"),
    ]


def test_a_prefix_cache_hit_is_computed_before_the_step(tmp_path: Path) -> None:
    sched = build_scheduler(EngineOptions(step_trace=tmp_path))
    prompt = " ".join(WORDS * 2)  # 32 words: at least one full 16-token block
    for rid in ("cmpl-miss", "cmpl-hit"):
        sched.add(_request(sched, rid, prompt, 1))
        _drain(sched)
    miss, hit = _records(tmp_path)
    assert miss.computed == [0] and hit.computed[0] >= 16 and hit.computed[0] % 16 == 0
    assert hit.computed[0] + hit.scheduled[0] == hit.prompt[0] == miss.scheduled[0]


def test_a_handed_over_kv_loads_without_a_row(tmp_path: Path) -> None:
    prefill = build_scheduler(EngineOptions())
    leg = _request(prefill, "cmpl-p", "the old man saw the river near the town", 1)
    prefill.add(EngineRequest(leg.request_id, leg.prompt_ids, leg.params, hand_over=True))
    (delivery,) = prefill.step()
    decoder = build_scheduler(EngineOptions(step_trace=tmp_path))
    decoder.add(EngineRequest("cmpl-d", leg.prompt_ids, _request(decoder, "x", "x", 3).params, handed=delivery.handed))
    assert _drain(decoder) == {"cmpl-d": 3}  # the first token came with the KV, two were decoded here
    n = len(leg.prompt_ids)
    assert [(r.ids, r.scheduled, r.computed) for r in _records(tmp_path)] == [
        (["cmpl-d"], [1], [n]),
        (["cmpl-d"], [1], [n + 1]),
    ]


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 12), st.integers(1, 6))
def test_every_output_position_is_computed_by_exactly_one_row(seed: int, requests: int, max_seqs: int) -> None:
    """The contract's rule: the row with ``computed + scheduled == prompt + j`` produced output ``j``; with no
    preemption every position a request got has exactly one such row (repeated prompts hit the prefix cache)."""
    rnd = random.Random(seed)
    with tempfile.TemporaryDirectory() as folder:  # one per example: hypothesis reuses a test's tmp_path
        sched = build_scheduler(EngineOptions(step_trace=Path(folder), max_num_seqs=max_seqs))
        prompts = [" ".join(rnd.choices(WORDS, k=rnd.randint(1, 40))) for _ in range(3)]
        got: dict[str, int] = {}
        prompt_len: dict[str, int] = {}
        for i in range(requests):
            req = _request(sched, f"cmpl-{i}", rnd.choice(prompts), rnd.randint(1, 6))
            prompt_len[req.request_id] = len(req.prompt_ids)
            sched.add(req)
            if rnd.random() < 0.5:
                for d in sched.step():
                    got[d.request_id] = got.get(d.request_id, 0) + len(d.events)
        for rid, n in _drain(sched).items():
            got[rid] = got.get(rid, 0) + n
        produced: dict[str, list[int]] = {}
        for record in _records(Path(folder)):
            assert len(record.ids) == len(set(record.ids)) <= max_seqs
            for rid, s, c, p in zip(record.ids, record.scheduled, record.computed, record.prompt, strict=True):
                assert p == prompt_len[rid] and s >= 1
                produced.setdefault(rid, []).append(c + s - p)
    assert produced == {rid: list(range(n)) for rid, n in got.items()}
