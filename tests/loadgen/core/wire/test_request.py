"""build_body: every sampling parameter explicit, optional features in each server's spelling."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.wire import Features, Kind, build_body

ALL = Features(
    return_token_ids=True,
    logprobs=True,
    top_logprobs=5,
    tokens_as_ids=True,
    include_usage=True,
    sglext_output_ids=True,
)
MESSAGES = [{"role": "user", "content": "Say yes."}]


def test_completions_body_with_every_feature() -> None:
    body = build_body(
        "completions",
        model="m",
        prompt="Say yes.",
        messages=None,
        max_tokens=64,
        seed=1234,
        stream=True,
        features=ALL,
        stop=["\n\n"],
    )
    assert body == {
        "model": "m",
        "prompt": "Say yes.",
        "max_tokens": 64,
        "seed": 1234,
        "temperature": 0,
        "top_p": 1,
        "n": 1,
        "frequency_penalty": 0,
        "presence_penalty": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "stop": ["\n\n"],
        "logprobs": 5,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
        "return_output_ids_in_sglext": True,
    }


def test_chat_body_uses_boolean_logprobs_and_top_logprobs() -> None:
    body = build_body(
        "chat",
        model="m",
        prompt=None,
        messages=MESSAGES,
        max_tokens=8,
        seed=None,
        stream=False,
        features=Features(logprobs=True, top_logprobs=0, include_usage=True),
    )
    assert body == {
        "model": "m",
        "messages": MESSAGES,
        "max_tokens": 8,
        "seed": None,
        "temperature": 0,
        "top_p": 1,
        "n": 1,
        "frequency_penalty": 0,
        "presence_penalty": 0,
        "stream": False,
        "logprobs": True,
        "top_logprobs": 0,
    }


def test_completions_logprobs_zero_is_sent_as_integer_zero() -> None:
    body = build_body(
        "completions",
        model="m",
        prompt="p",
        messages=None,
        max_tokens=1,
        seed=0,
        stream=False,
        features=Features(logprobs=True),
    )
    assert body["logprobs"] == 0 and body["logprobs"] is not False


def test_extra_is_merged_but_cannot_override_explicit_parameters() -> None:
    def body(extra: dict[str, object]) -> dict[str, object]:
        return build_body(
            "completions",
            model="m",
            prompt="p",
            messages=None,
            max_tokens=4,
            seed=1,
            stream=False,
            features=Features(),
            extra=extra,
        )

    merged = body({"repetition_penalty": 1.0, "top_k": -1})
    assert merged["repetition_penalty"] == 1.0 and merged["top_k"] == -1
    with pytest.raises(ValueError, match=r"\['temperature'\]"):
        body({"temperature": 0.7})


@pytest.mark.parametrize(
    ("kind", "prompt", "messages", "max_tokens", "reason"),
    [
        ("completions", None, None, 4, "takes `prompt`"),
        ("completions", "p", MESSAGES, 4, "takes `prompt`"),
        ("chat", "p", MESSAGES, 4, "takes `messages`"),
        ("chat", None, None, 4, "takes `messages`"),
        ("embeddings", "p", None, 4, "is not"),
        ("completions", "p", None, 0, "max_tokens"),
    ],
)
def test_impossible_requests_are_refused(
    kind: Kind, prompt: str | None, messages: list[dict[str, str]] | None, max_tokens: int, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        build_body(
            kind,
            model="m",
            prompt=prompt,
            messages=messages,
            max_tokens=max_tokens,
            seed=1,
            stream=False,
            features=Features(),
        )


@given(
    kind=st.sampled_from(["completions", "chat"]),
    max_tokens=st.integers(min_value=1, max_value=1 << 20),
    seed=st.none() | st.integers(min_value=0, max_value=2**63 - 1),
    stream=st.booleans(),
    features=st.builds(
        Features,
        return_token_ids=st.booleans(),
        logprobs=st.booleans(),
        top_logprobs=st.integers(min_value=0, max_value=20),
        tokens_as_ids=st.booleans(),
        include_usage=st.booleans(),
        sglext_output_ids=st.booleans(),
    ),
)
def test_sampling_parameters_are_always_explicit(
    kind: Kind, max_tokens: int, seed: int | None, stream: bool, features: Features
) -> None:
    body = build_body(
        kind,
        model="m",
        prompt="p" if kind == "completions" else None,
        messages=MESSAGES if kind == "chat" else None,
        max_tokens=max_tokens,
        seed=seed,
        stream=stream,
        features=features,
    )
    assert (body["temperature"], body["top_p"], body["n"]) == (0, 1, 1)
    assert (body["frequency_penalty"], body["presence_penalty"]) == (0, 0)
    assert body["max_tokens"] == max_tokens and body["seed"] == seed and "seed" in body
    assert body["stream"] is stream
    assert ("stream_options" in body) == (stream and features.include_usage)


@given(
    kind=st.sampled_from(["completions", "chat"]),
    stream=st.booleans(),
    batch_sizes=st.booleans(),
    include_usage=st.booleans(),
    logprobs=st.booleans(),
)
def test_x_batch_sizes_is_asked_for_only_with_the_feature(
    kind: Kind, stream: bool, batch_sizes: bool, include_usage: bool, logprobs: bool
) -> None:
    body = build_body(
        kind,
        model="m",
        prompt="p" if kind == "completions" else None,
        messages=MESSAGES if kind == "chat" else None,
        max_tokens=4,
        seed=1,
        stream=stream,
        features=Features(batch_sizes=batch_sizes, include_usage=include_usage, logprobs=logprobs),
    )
    if batch_sizes:
        assert body["x_batch_sizes"] is True
    else:
        assert "x_batch_sizes" not in body


def test_x_batch_sizes_cannot_be_overridden_by_extra() -> None:
    with pytest.raises(ValueError, match=r"\['x_batch_sizes'\]"):
        build_body(
            "completions",
            model="m",
            prompt="p",
            messages=None,
            max_tokens=4,
            seed=1,
            stream=False,
            features=Features(batch_sizes=True),
            extra={"x_batch_sizes": False},
        )
