"""SGLang's native ``/generate`` dialect: bodies as SGLang reads them, answers whole or streamed (cumulative or
incremental chunks, any chunking) folded into the same ``Completion``, faults as ``MalformedResponse``."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.wire import (
    Features,
    MalformedResponse,
    StreamAccumulator,
    StreamError,
    build_body,
    features_from_probe,
    parse_body,
    parse_usage,
)
from loadgen.core.wire.urls import api_path

RICH = Features(logprobs=True, top_logprobs=2)


def answer(ids: list[int], *, start: int = 0, total: int | None = None, done: bool = True) -> dict[str, Any]:
    """An answer in SGLang 0.5.15's shape for ``ids`` at positions ``start..``, ``total`` tokens so far."""
    total = start + len(ids) if total is None else total
    return {
        "text": "".join(f"<{t}>" for t in ids),
        "output_ids": ids,
        "meta_info": {
            "id": "9f",
            "finish_reason": {"type": "length", "length": total} if done else None,
            "prompt_tokens": 7,
            "weight_version": "default",
            "completion_tokens": total,
            "cached_tokens": 3,
            "output_token_logprobs": [[-0.5 - i / 8, t, f"<{t}>"] for i, t in enumerate(ids, start)],
            "output_top_logprobs": [
                [[-0.5 - i / 8, t, f"<{t}>"], [-2.0, t + 1, f"<{t + 1}>"]] for i, t in enumerate(ids, start)
            ],
        },
    }


def test_body_states_every_sampling_parameter_in_sglangs_names() -> None:
    body = build_body(
        "generate",
        model="m",
        prompt="hi",
        messages=None,
        max_tokens=9,
        seed=4,
        stream=True,
        features=RICH,
        stop=["\n"],
        extra={"cache_salt": "s1", "repetition_penalty": 1.0},
    )
    assert body == {
        "text": "hi",
        "sampling_params": {
            "max_new_tokens": 9,
            "temperature": 0,
            "top_p": 1,
            "top_k": -1,
            "n": 1,
            "frequency_penalty": 0,
            "presence_penalty": 0,
            "sampling_seed": 4,
            "stop": ["\n"],
            "repetition_penalty": 1.0,
        },
        "stream": True,
        "return_logprob": True,
        "logprob_start_len": -1,
        "top_logprobs_num": 2,
        "return_text_in_logprobs": True,
        "extra_key": "s1",  # SGLang's name for a cache salt on this route
    }
    plain = build_body(
        "generate", model="m", prompt="hi", messages=None, max_tokens=1, seed=None, stream=False, features=Features()
    )
    assert "return_logprob" not in plain and "sampling_seed" not in plain["sampling_params"]


def test_body_refuses_what_no_sglang_server_could_take() -> None:
    with pytest.raises(ValueError, match="prompt"):
        build_body(
            "generate",
            model="m",
            prompt=None,
            messages=[{"role": "user", "content": "x"}],
            max_tokens=1,
            seed=0,
            stream=False,
            features=RICH,
        )
    with pytest.raises(ValueError, match="temperature"):
        build_body(
            "generate",
            model="m",
            prompt="x",
            messages=None,
            max_tokens=1,
            seed=0,
            stream=False,
            features=RICH,
            extra={"temperature": 1},
        )


def test_whole_answer() -> None:
    c = parse_body("generate", orjson.dumps(answer([5, 6, 7])))
    assert c.token_ids == [5, 6, 7]
    assert c.tokens == ["<5>", "<6>", "<7>"] and c.text == "<5><6><7>"
    assert c.logprobs == [-0.5, -0.625, -0.75]
    assert c.top_logprobs is not None and c.top_logprobs[1] == [("<6>", -0.625), ("<7>", -2.0)]
    assert c.finish_reason == "length" and c.answer_id == "9f"  # meta_info.id: the engine's rid
    assert c.usage == {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "total_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 3},
    }
    assert parse_usage(orjson.dumps(answer([5])), "generate") == {
        "prompt_tokens": 7,
        "completion_tokens": 1,
        "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 3},
    }


def test_stop_reason_and_answers_without_logprobs() -> None:
    obj = answer([1, 2])
    obj["meta_info"]["finish_reason"] = {"type": "stop", "matched": 0}
    del obj["meta_info"]["output_token_logprobs"], obj["meta_info"]["output_top_logprobs"]
    c = parse_body("generate", orjson.dumps(obj))
    assert c.finish_reason == "stop" and c.token_ids == [1, 2]
    assert c.tokens is None and c.logprobs is None and c.top_logprobs is None


def test_a_null_logprob_makes_the_sequence_incomparable_not_zero() -> None:
    obj = answer([1, 2])
    obj["meta_info"]["output_token_logprobs"][1][0] = None  # orjson writes -inf as null
    c = parse_body("generate", orjson.dumps(obj))
    assert c.token_ids == [1, 2] and c.tokens == ["<1>", "<2>"] and c.logprobs is None


@pytest.mark.parametrize(
    ("obj", "error", "match"),
    [
        ({"error": {"message": "bad input", "code": 400}}, StreamError, "bad input"),
        (
            {"text": "", "output_ids": [], "meta_info": {"finish_reason": {"type": "abort", "message": "oom"}}},
            StreamError,
            "oom",
        ),
        ({"choices": []}, MalformedResponse, "not a /generate answer"),
        ({"text": "x", "output_ids": ["a"], "meta_info": {}}, MalformedResponse, "output_ids"),
        ({"text": 3, "output_ids": [1], "meta_info": {}}, MalformedResponse, "text"),
        (
            {"text": "x", "output_ids": [1], "meta_info": {"output_token_logprobs": [[-1.0]]}},
            MalformedResponse,
            "logprob entry",
        ),
        ({"text": "x", "output_ids": [1], "meta_info": {"finish_reason": 5}}, MalformedResponse, "finish_reason"),
        ([1, 2], MalformedResponse, "not an object"),
    ],
)
def test_faults(obj: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        parse_body("generate", orjson.dumps(obj))


def _stream(ids: list[int], cuts: list[int], incremental: bool) -> list[str]:
    """The answer for ``ids`` streamed in chunks ending at ``cuts``, as SGLang would send it."""
    chunks, start = [], 0
    for end in [*cuts, len(ids)]:
        done = end == len(ids)
        if incremental:
            obj = answer(ids[start:end], start=start, total=end, done=done)
        else:
            obj = answer(ids[:end], total=end, done=done)
            if not done:
                obj["text"] = None  # cumulative text is deferred to the last chunk
        chunks.append(orjson.dumps(obj).decode())
        start = end
    return [*chunks, "[DONE]"]


@given(
    ids=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=20),
    cuts=st.lists(st.integers(0, 20), max_size=6),
    incremental=st.booleans(),
)
def test_any_stream_of_an_answer_gives_the_whole_answer(ids: list[int], cuts: list[int], incremental: bool) -> None:
    cuts = sorted({c for c in cuts if 0 < c < len(ids)})
    acc = StreamAccumulator("generate")
    carried = [acc.add(chunk) for chunk in _stream(ids, cuts, incremental)]
    assert acc.done and carried[0]  # the first chunk carries the first token: time to first token
    assert acc.finish() == parse_body("generate", orjson.dumps(answer(ids)))


def test_a_truncated_stream_keeps_what_arrived() -> None:
    acc = StreamAccumulator("generate")
    for chunk in _stream([4, 5, 6, 7], [2], incremental=False)[:1]:
        acc.add(chunk)
    c = acc.finish()
    assert not acc.done and c.token_ids == [4, 5] and c.finish_reason is None


def test_probe_features_and_route() -> None:
    body = orjson.dumps(answer([1]))
    assert features_from_probe("generate", body, Features(logprobs=True, top_logprobs=2, return_token_ids=True)) == (
        Features(logprobs=True, top_logprobs=2)
    )
    obj = answer([1])
    del obj["meta_info"]["output_top_logprobs"]
    assert features_from_probe("generate", orjson.dumps(obj), RICH) == Features(logprobs=True)
    assert api_path("http://h:30000/v1", "generate") == "/generate"
    assert api_path("http://h/sglang/", "generate") == "/sglang/generate"
