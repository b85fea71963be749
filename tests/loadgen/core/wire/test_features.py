"""features_from_probe: keep only the features a probe's answer proves."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loadgen.core.wire import Features, MalformedResponse, features_from_probe

FIXTURES = Path(__file__).with_name("fixtures")
WANTED = Features(
    return_token_ids=True,
    logprobs=True,
    top_logprobs=2,
    tokens_as_ids=False,
    include_usage=True,
    sglext_output_ids=True,
)


def test_vllm_completions_supports_ids_and_logprobs() -> None:
    got = features_from_probe("completions", (FIXTURES / "vllm_completions.json").read_bytes(), WANTED)
    assert got == Features(return_token_ids=True, logprobs=True, top_logprobs=2, include_usage=True)


def test_llamacpp_chat_has_logprobs_but_ignored_return_token_ids() -> None:
    got = features_from_probe("chat", (FIXTURES / "llamacpp_chat.json").read_bytes(), WANTED)
    assert got == Features(logprobs=True, top_logprobs=2, include_usage=True)


def test_a_server_that_ignores_everything_keeps_nothing_but_usage() -> None:
    body = orjson.dumps(
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Yes"}, "finish_reason": "stop"}]}
    )
    assert features_from_probe("chat", body, WANTED) == Features(include_usage=True)


def test_sglang_sglext_ids_are_recognised() -> None:
    body = orjson.dumps(
        {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Yes"}, "finish_reason": "stop"}],
            "sglext": {"output_ids": [[9454, 151645]]},
        }
    )
    got = features_from_probe("chat", body, Features(sglext_output_ids=True, return_token_ids=True))
    assert got == Features(sglext_output_ids=True)


def test_token_id_strings_are_recognised_only_when_every_token_is_one() -> None:
    def body(tokens: list[str]) -> bytes:
        content = [{"token": t, "logprob": -0.1, "top_logprobs": []} for t in tokens]
        choice = {"index": 0, "message": {"content": "ab"}, "logprobs": {"content": content}, "finish_reason": "stop"}
        return orjson.dumps({"choices": [choice]})

    asked = Features(logprobs=True, tokens_as_ids=True)
    assert features_from_probe("chat", body(["token_id:64", "token_id:65"]), asked) == Features(
        logprobs=True, tokens_as_ids=True
    )
    assert features_from_probe("chat", body(["a", "b"]), asked) == Features(logprobs=True)


def test_a_non_completion_probe_answer_raises() -> None:
    with pytest.raises(MalformedResponse):
        features_from_probe("chat", b'{"detail": "Not Found"}', WANTED)


def _with_sizes(sizes: object) -> bytes:
    choice = {"index": 0, "text": "Yes", "token_ids": [9454], "finish_reason": "length"}
    body: dict[str, object] = {"choices": [choice]}
    if sizes is not None:
        body["x_batch_sizes"] = sizes
    return orjson.dumps(body)


def test_batch_sizes_are_kept_only_when_the_answer_carries_them() -> None:
    asked = Features(return_token_ids=True, batch_sizes=True)
    assert features_from_probe("completions", _with_sizes([1]), asked) == asked
    assert features_from_probe("completions", _with_sizes(None), asked) == Features(return_token_ids=True)
    # the embedded engine answers only when asked; a server volunteering them proves nothing wanted
    assert features_from_probe("completions", _with_sizes([1]), Features(return_token_ids=True)) == Features(
        return_token_ids=True
    )


def test_vllm_probe_answer_has_no_batch_sizes() -> None:
    got = features_from_probe(
        "completions", (FIXTURES / "vllm_completions.json").read_bytes(), Features(batch_sizes=True, logprobs=True)
    )
    assert got == Features(logprobs=True)


def test_malformed_batch_sizes_in_a_probe_answer_raise() -> None:
    with pytest.raises(MalformedResponse, match="x_batch_sizes"):
        features_from_probe("completions", _with_sizes([0]), Features(batch_sizes=True))
