"""parse_usage: the background's light parse agrees with parse_body on usage and on every fault class."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core.wire import Kind, MalformedResponse, StreamError, parse_body, parse_usage

FIXTURES = Path(__file__).with_name("fixtures")


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("vllm_completions.json", "completions"),
        ("vllm_chat.json", "chat"),
        ("llamacpp_completions.json", "completions"),
        ("llamacpp_chat.json", "chat"),
    ],
)
def test_usage_of_real_bodies_is_parse_bodys(name: str, kind: Kind) -> None:
    body = (FIXTURES / name).read_bytes()
    usage = parse_usage(body)
    assert usage is not None and usage["completion_tokens"] > 0
    assert usage == parse_body(kind, body).usage


@pytest.mark.parametrize(
    ("body", "error", "reason"),
    [
        (b"<html>502 Bad Gateway</html>", MalformedResponse, "not JSON"),
        (b"[1, 2]", MalformedResponse, "not an object"),
        (b'{"id": "x"}', MalformedResponse, "lacks `choices`"),
        (b'{"choices": []}', MalformedResponse, "lacks `choices`"),
        (b'{"choices": {"0": {}}}', MalformedResponse, "lacks `choices`"),
        (b'{"error": {"message": "overloaded"}}', StreamError, "overloaded"),
        (b'{"object": "error", "message": "bad prompt"}', StreamError, "bad prompt"),
    ],
)
def test_faults_raise_as_parse_body_would(body: bytes, error: type[Exception], reason: str) -> None:
    with pytest.raises(error, match=reason):
        parse_usage(body)
    with pytest.raises(error):
        parse_body("completions", body)


def test_a_body_without_usage_gives_none() -> None:
    assert parse_usage(b'{"choices": [{"index": 0, "text": "a"}]}') is None
    assert parse_usage(b'{"choices": [{"index": 0, "text": "a"}], "usage": null}') is None


@settings(max_examples=80, deadline=None)
@given(
    prompt=st.integers(0, 10**6),
    completion=st.integers(0, 10**5),
    text=st.text(max_size=40),
    with_usage=st.booleans(),
)
def test_agrees_with_parse_body_on_any_well_formed_body(
    prompt: int, completion: int, text: str, with_usage: bool
) -> None:
    obj: dict[str, object] = {"choices": [{"index": 0, "text": text, "finish_reason": "length"}]}
    if with_usage:
        obj["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion}
    body = orjson.dumps(obj)
    assert parse_usage(body) == parse_body("completions", body).usage
