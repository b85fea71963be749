"""Request validation: every client mistake is a 4xx naming the field; both dialects map to one shape."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.engine.protocol import MAX_PROMPTS, MODEL_ID, ApiError, chat_prompt_ids, parse_request
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
        ({"prompt": "hi", "n": 0}, 400, "n"),
        ({"prompt": ["a", "b"], "n": MAX_PROMPTS // 2 + 1}, 400, "n"),
        ({"prompt": "hi", "min_p": 1.5}, 400, "min_p"),
        ({"prompt": "hi", "prompt_logprobs": 21}, 400, "prompt_logprobs"),
        ({"prompt": "hi", "prompt_logprobs": -1}, 400, "prompt_logprobs"),
        ({"prompt": "hi", "prompt_logprobs": -2}, 400, "prompt_logprobs"),
        ({"prompt": "hi", "prompt_logprobs": "1"}, 400, "prompt_logprobs"),
        ({"prompt": "hi", "prompt_logprobs": 1, "stream": True}, 400, "prompt_logprobs"),
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
        ({"messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 1}, "prompt_logprobs"),
    ],
)
def test_chat_mistakes_are_400(body: Any, param: str) -> None:
    with pytest.raises(ApiError) as info:
        _parse(body, chat=True)
    assert (info.value.status, info.value.param) == (400, param)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"prompt_logprobs": 1, "stream": True}, "`prompt_logprobs` are not available when `stream=True`."),
        ({"prompt_logprobs": -3}, "`prompt_logprobs` must be a positive value or -1."),
        ({"prompt_logprobs": 21}, "Requested prompt logprobs of 21, which is greater than max allowed: 20"),
        (
            {"prompt_logprobs": -1},
            f"Requested prompt logprobs of {TOK.vocab_size}, which is greater than max allowed: 20",
        ),
    ],
)
def test_prompt_logprobs_mistakes_read_as_vllm_words_them(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ApiError) as info:
        _parse({"prompt": [5, 6, 7], **body})
    assert (info.value.status, info.value.param, info.value.message) == (400, "prompt_logprobs", message)


def test_prompt_logprobs_zero_may_stream_as_in_vllm_and_k_is_kept() -> None:
    assert _parse({"prompt": [5, 6], "prompt_logprobs": 0, "stream": True}).params.prompt_logprobs == 0
    assert _parse({"prompt": [5, 6], "prompt_logprobs": 20}).params.prompt_logprobs == 20
    assert _parse({"prompt": [5, 6]}).params.prompt_logprobs is None


@given(seed=st.one_of(st.none(), st.integers(0, 2**62)), n=st.integers(1, 8), prompts=st.integers(1, 3))
def test_choices_are_prompt_by_prompt_child_j_seeded_seed_plus_j(seed: int | None, n: int, prompts: int) -> None:
    body = {"prompt": [[5 + i, 6] for i in range(prompts)], "n": n, "temperature": 1.0, "seed": seed}
    parsed = _parse(body)
    choices = parsed.choices()
    assert len(choices) == parsed.choice_count == n * prompts
    for index, choice in enumerate(choices):
        assert choice.prompts == (parsed.prompts[index // n],) and choice.n == 1
        assert choice.params.seed == (None if seed is None else seed + index % n)


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


# A completions prompt list: each prompt is its own engine request, with the request's other fields.


def test_a_prompt_list_is_each_prompt_parsed_alone_in_order() -> None:
    parsed = _parse({"prompt": ["the old man", "the sea", "a king"], "max_tokens": 4, "temperature": 0})
    assert parsed.prompts == tuple(TOK.encode(p) for p in ("the old man", "the sea", "a king"))
    assert [parsed.one(i).prompt_ids for i in range(3)] == list(parsed.prompts)
    assert parsed.one(1) == _parse({"prompt": "the sea", "max_tokens": 4, "temperature": 0})
    assert _parse({"prompt": [[5, 6, 7], [8]]}).prompts == ([5, 6, 7], [8])
    with pytest.raises(ValueError, match="3 prompts"):
        _ = parsed.prompt_ids  # several prompts have no single one: each is rendered through one(i)


def test_a_one_element_list_is_the_plain_prompt() -> None:
    assert _parse({"prompt": ["the sea"]}) == _parse({"prompt": "the sea"})
    assert _parse({"prompt": [[5, 6]]}) == _parse({"prompt": [5, 6]})
    with pytest.raises(ApiError) as info:
        _parse({"prompt": [""]})
    assert info.value.param == "prompt"  # not prompt[0]: it is the request's one prompt, as before


@pytest.mark.parametrize(
    ("prompt", "param", "words"),
    [
        ([], "prompt", "non-empty"),
        (["a", ""], "prompt[1]", "non-empty string"),
        ([[1, 2], [-1]], "prompt[1]", "token ids"),
        (["a", "b", [True]], "prompt[2]", "token ids"),
        (["a", 5], "prompt", "token ids"),  # not a list of prompts: read as token ids, which it is not either
        (["a", "b", [1] * 60], "prompt[2]", "60 in prompt[2]"),  # max_model_len 64, 16 tokens asked
        (["a"] * (MAX_PROMPTS + 1), "prompt", f"at most {MAX_PROMPTS} prompts"),
    ],
)
def test_prompt_list_mistakes_name_the_prompt(prompt: Any, param: str, words: str) -> None:
    with pytest.raises(ApiError) as info:
        _parse({"prompt": prompt})
    assert (info.value.status, info.value.param) == (400, param)
    assert words in info.value.message


def test_the_list_may_hold_max_prompts() -> None:
    assert len(_parse({"prompt": ["a"] * MAX_PROMPTS}).prompts) == MAX_PROMPTS


_VALID = st.one_of(
    st.text(min_size=1, max_size=8),  # at most 32 bytes, so 32 tokens: fits 64 with max_tokens 4
    st.lists(st.integers(0, TOK.vocab_size - 1), min_size=1, max_size=40),
)
_INVALID: st.SearchStrategy[str | list[int]] = st.one_of(
    st.just(""),
    st.just([]),
    st.lists(st.integers(0, TOK.vocab_size - 1), min_size=61, max_size=70),  # no room for 4 tokens in 64
    st.lists(st.sampled_from([-1, TOK.vocab_size, 10**9]), min_size=1, max_size=3),
)


@given(prompts=st.lists(st.one_of(_VALID, _VALID, _INVALID), min_size=2, max_size=6))
def test_a_list_parses_as_its_prompts_sent_alone(prompts: list[Any]) -> None:
    """The invariant of a prompt list: it is valid iff each prompt is valid alone, and each prompt's request is
    exactly what sending it alone would have parsed to. The prompt named is the first malformed one (alone: an
    error on ``prompt``), else the first too long (alone: on ``max_tokens``): every prompt is read before any
    is measured against the context, as a lone prompt is read before ``max_tokens``."""
    common = {"max_tokens": 4, "temperature": 0.5, "seed": 3, "logprobs": 2, "x_batch_sizes": True}
    alone: list[Any] = []
    for p in prompts:
        try:
            alone.append(_parse({**common, "prompt": p}))
        except ApiError as err:
            alone.append(err)
    errors = [(a.param != "prompt", i) for i, a in enumerate(alone) if isinstance(a, ApiError)]
    if errors:
        with pytest.raises(ApiError) as info:
            _parse({**common, "prompt": prompts})
        assert info.value.param == f"prompt[{min(errors)[1]}]"
        return
    parsed = _parse({**common, "prompt": prompts})
    assert [parsed.one(i) for i in range(len(prompts))] == alone
