"""A burst's copies in one request: the body carries every prompt in order, and the answer splits into one
completion per prompt exactly as each part alone would parse, whatever order the server lists them in."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.wire import Features, MalformedResponse, StreamError, build_body, parse_body
from loadgen.core.wire.batch import batch_body, parse_batch

FIXTURES = Path(__file__).with_name("fixtures")
SGLANG: dict[str, Any] = orjson.loads((FIXTURES / "sglang-0.5.15-h200" / "default" / "generate.json").read_bytes())
VLLM: dict[str, Any] = orjson.loads((FIXTURES / "vllm_completions.json").read_bytes())
FEATURES = Features(return_token_ids=True, logprobs=True, top_logprobs=2)


def body(kind: str, prompt: str, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"max_tokens": 8, "seed": 0, "stream": False, "features": FEATURES, **kw}
    return build_body(kind, model="m", prompt=prompt, messages=None, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize(("kind", "field"), [("completions", "prompt"), ("generate", "text")])
def test_one_body_carries_every_prompt_in_order_unstreamed(kind: str, field: str) -> None:
    bodies = [body(kind, p, stream=True) for p in ("a", "bb", "a", "ccc")]
    got = batch_body(kind, bodies)  # type: ignore[arg-type]
    assert got[field] == ["a", "bb", "a", "ccc"]
    assert got["stream"] is False and "stream_options" not in got
    alone = {k: v for k, v in bodies[0].items() if k not in (field, "stream", "stream_options")}
    assert {k: v for k, v in got.items() if k not in (field, "stream")} == alone


def test_bodies_that_ask_differently_cannot_share_a_request() -> None:
    with pytest.raises(ValueError, match="differ only in their prompts"):
        batch_body("completions", [body("completions", "a"), body("completions", "b", max_tokens=9)])
    with pytest.raises(ValueError, match="no prompt list"):
        batch_body("chat", [{"messages": []}])


def generate_answer(ids: list[int]) -> dict[str, Any]:
    """SGLang's captured answer with other ids (and as many logprob entries)."""
    one = copy.deepcopy(SGLANG)
    entries = one["meta_info"]["output_token_logprobs"]
    one["output_ids"] = ids
    one["meta_info"]["output_token_logprobs"] = [[entries[0][0], i, f"t{i}"] for i in ids]
    one["meta_info"]["output_top_logprobs"] = None
    one["meta_info"]["completion_tokens"] = len(ids)
    return one


def test_a_generate_list_answer_splits_into_each_prompts_completion() -> None:
    answers = [generate_answer([5, 6]), generate_answer([7]), generate_answer([5, 6])]
    parts = parse_batch("generate", orjson.dumps(answers), 3)
    for part, answer in zip(parts, answers, strict=True):
        assert part == parse_body("generate", orjson.dumps(answer))
    assert [p.token_ids for p in parts] == [[5, 6], [7], [5, 6]]  # type: ignore[union-attr]
    assert parts[1].usage["completion_tokens"] == 1  # type: ignore[union-attr,index]  # SGLang: usage per copy


def test_one_faulty_part_is_that_copys_alone_and_a_whole_fault_raises() -> None:
    answers = [generate_answer([1]), {"error": {"message": "aborted"}}, {"text": "no ids"}]
    parts = parse_batch("generate", orjson.dumps(answers), 3)
    assert parts[0].token_ids == [1]  # type: ignore[union-attr]
    assert isinstance(parts[1], StreamError) and parts[1].server_message == "aborted"
    assert isinstance(parts[2], MalformedResponse) and "answer [2]" in str(parts[2])
    with pytest.raises(MalformedResponse, match="2 answers for 3 prompts"):
        parse_batch("generate", orjson.dumps(answers[:2]), 3)
    with pytest.raises(StreamError, match="overloaded"):
        parse_batch("generate", b'{"error": {"message": "overloaded"}}', 3)
    with pytest.raises(MalformedResponse, match="not JSON"):
        parse_batch("completions", b"{", 3)


def completions_answer(order: list[int]) -> dict[str, Any]:
    """vLLM's completions answer with one choice per prompt, listed in ``order``, choice i saying "c{i}"."""
    answer = copy.deepcopy(VLLM)
    template = answer["choices"][0]
    answer["choices"] = [{**copy.deepcopy(template), "index": i, "text": f"c{i}", "token_ids": [i]} for i in order]
    for c in answer["choices"]:
        c["logprobs"] = None
    return answer


@given(st.permutations(range(6)))
def test_choices_land_on_their_prompt_in_whatever_order_they_come(order: list[int]) -> None:
    parts = parse_batch("completions", orjson.dumps(completions_answer(order)), 6)
    assert [p.text for p in parts] == [f"c{i}" for i in range(6)]  # type: ignore[union-attr]
    assert [p.token_ids for p in parts] == [[i] for i in range(6)]  # type: ignore[union-attr]
    assert all(p.usage is None for p in parts)  # type: ignore[union-attr]  # summed usage belongs to no copy


@pytest.mark.parametrize(
    ("order", "why"), [([0, 1, 1], "index 1 is not one of 0..2, each once"), ([0, 1], "2 choices for 3 prompts")]
)
def test_choices_that_miss_or_repeat_a_prompt_are_malformed(order: list[int], why: str) -> None:
    with pytest.raises(MalformedResponse, match=why):
        parse_batch("completions", orjson.dumps(completions_answer(order)), 3)


def test_a_copys_x_batch_sizes_stay_its_own() -> None:
    answer = completions_answer([1, 0])
    for c in answer["choices"]:
        c["x_batch_sizes"] = [2, 2, 1 + c["index"]]
    parts = parse_batch("completions", orjson.dumps(answer), 2)
    assert [p.batch_sizes for p in parts] == [[2, 2, 1], [2, 2, 2]]  # type: ignore[union-attr]
