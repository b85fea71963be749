"""Request validation: every client mistake is a 4xx naming the field; both dialects map to one shape."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.engine.protocol import MODEL_ID, ApiError, chat_prompt_ids, parse_request
from loadgen.engine.tokenizer import load_tokenizer

TOK = load_tokenizer()


def _parse(body: Any, chat: bool = False) -> Any:
    return parse_request(body, chat, TOK, max_model_len=64)


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"prompt": "hi", "model": "gpt-4"}, 404, "model"),
        ({"prompt": ""}, 400, "prompt"),
        ({"prompt": [1, -2]}, 400, "prompt"),
        ({"prompt": "hi", "max_tokens": 0}, 400, "max_tokens"),
        ({"prompt": "hi", "max_tokens": "5"}, 400, "max_tokens"),
        ({"prompt": "hi", "max_tokens": 1000}, 400, "max_tokens"),
        ({"prompt": "hi", "temperature": -1}, 400, "temperature"),
        ({"prompt": "hi", "top_p": 0}, 400, "top_p"),
        ({"prompt": "hi", "logprobs": 21}, 400, "logprobs"),
        ({"prompt": "hi", "logprobs": True}, 400, "logprobs"),
        ({"prompt": "hi", "n": 2}, 400, "n"),
        ({"prompt": "hi", "echo": True}, 400, "echo"),
        ({"prompt": "hi", "presence_penalty": 0.5}, 400, "presence_penalty"),
        ({"prompt": "hi", "stop": 5}, 400, "stop"),
        ({"prompt": "hi", "seed": 1.5}, 400, "seed"),
        ({"prompt": "hi", "stream_options": {"include_usage": True}}, 400, "stream_options"),
        ({"prompt": "hi", "stop_token_ids": [10**9]}, 400, "stop_token_ids"),
        ({"prompt": "hi", "x_batch_sizes": "yes"}, 400, "x_batch_sizes"),
        ([1, 2], 400, None),
    ],
)
def test_completion_mistakes_are_4xx_naming_the_field(body: Any, status: int, param: str | None) -> None:
    with pytest.raises(ApiError) as info:
        _parse(body)
    assert info.value.status == status
    assert info.value.param == param
    error = info.value.body()["error"]
    assert error["code"] == status and error["message"] and error["type"].endswith(("Error", "Large"))


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}, "top_logprobs"),
        ({"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 30}, "top_logprobs"),
    ],
)
def test_chat_mistakes_are_400(body: Any, param: str) -> None:
    with pytest.raises(ApiError) as info:
        _parse(body, chat=True)
    assert (info.value.status, info.value.param) == (400, param)


def test_both_dialects_map_to_the_same_sampling_parameters() -> None:
    common = {"model": MODEL_ID, "temperature": 0, "seed": 7, "max_tokens": 5, "stop": ["x"], "top_p": 1}
    comp = _parse({**common, "prompt": "hello there", "logprobs": 3, "return_token_ids": True})
    chat = _parse(
        {**common, "messages": [{"role": "user", "content": "hello"}], "logprobs": True, "top_logprobs": 3}, chat=True
    )
    assert comp.params == chat.params
    assert comp.params.greedy and comp.params.logprobs == 3 and comp.return_token_ids
    assert comp.prompt_ids == TOK.encode("hello there")


def test_model_may_be_omitted_and_token_prompts_are_accepted() -> None:
    assert _parse({"prompt": [5, 6, 7]}).prompt_ids == [5, 6, 7]
    assert _parse({"prompt": ["a string in a list"]}).prompt_ids == TOK.encode("a string in a list")
    assert _parse({"prompt": "x"}).params.max_tokens == 16


def test_chat_template_wraps_each_message_and_opens_the_assistant_turn() -> None:
    ids = chat_prompt_ids(
        [{"role": "system", "content": "be"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}], TOK
    )
    text = TOK.decode(ids)
    assert text == "<|system|>be<|end|><|user|>hi<|end|><|assistant|>"


def test_chat_max_tokens_defaults_to_the_remaining_context() -> None:
    parsed = _parse({"messages": [{"role": "user", "content": "hi"}]}, chat=True)
    assert parsed.params.max_tokens == 64 - len(parsed.prompt_ids)


def test_x_batch_sizes_is_an_accepted_flag_in_both_dialects_and_off_by_default() -> None:
    assert _parse({"prompt": "hi", "x_batch_sizes": True}).x_batch_sizes
    assert _parse({"messages": [{"role": "user", "content": "hi"}], "x_batch_sizes": True}, chat=True).x_batch_sizes
    assert not _parse({"prompt": "hi"}).x_batch_sizes
    assert not _parse({"prompt": "hi", "x_batch_sizes": None}).x_batch_sizes
