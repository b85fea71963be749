"""parse_body and StreamAccumulator against real-shaped bodies and transcripts of each server."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core.wire import Completion, Kind, MalformedResponse, StreamAccumulator, StreamError, parse_body
from loadgen.core.wire.sse import SSEDecoder

FIXTURES = Path(__file__).with_name("fixtures")

IDS = [785, 51950, 374, 1787, 1959, 11162, 198, 9454]
TOKENS = ["The", " café", " is", " open", " —", " 🎉", "\n", "Yes"]
LOGPROBS = [-0.0012, -0.2513, -0.0301, -1.2034, -0.5, -2.25, -0.0007, -0.75]
ALTERNATIVES = [" A", " cafe", " was", " closed", " -", " 🎊", " ", "No"]
ALT_LOGPROBS = [-6.9, -1.4, -3.6, -1.2701, -0.95, -2.3, -7.5, -0.8]
TOP = [[(t, lp), (a, alp)] for t, lp, a, alp in zip(TOKENS, LOGPROBS, ALTERNATIVES, ALT_LOGPROBS, strict=True)]
TEXT = "The café is open — 🎉\nYes"
USAGE: dict[str, Any] = {"prompt_tokens": 6, "total_tokens": 14, "completion_tokens": 8}

STREAMS: list[tuple[str, Kind]] = [
    ("vllm_completions_stream.sse", "completions"),
    ("vllm_chat_stream.sse", "chat"),
    ("llamacpp_completions_stream.sse", "completions"),
    ("llamacpp_chat_stream.sse", "chat"),
    ("sglang_chat_stream_sglext.sse", "chat"),
    ("sglang_completions_stream.sse", "completions"),
    ("tgi_chat_stream.sse", "chat"),
]


def read(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def run_stream(kind: Kind, chunks: list[bytes], *, tokens_as_ids: bool = False) -> tuple[StreamAccumulator, list[bool]]:
    decoder = SSEDecoder()
    acc = StreamAccumulator(kind, tokens_as_ids=tokens_as_ids)
    carried: list[bool] = []
    for chunk in chunks:
        carried.extend(acc.add(event.data) for event in decoder.feed(chunk))
    carried.extend(acc.add(event.data) for event in decoder.flush())
    return acc, carried


def stream_completion(name: str, kind: Kind, *, tokens_as_ids: bool = False) -> Completion:
    acc, _ = run_stream(kind, [read(name)], tokens_as_ids=tokens_as_ids)
    assert acc.done
    return acc.finish()


def expected(
    *, ids: list[int] | None, usage: dict[str, Any] | None, top: bool = True, answer_id: str | None = None
) -> Completion:
    """The fixtures' completion; ``answer_id``: the ``id`` the fixture's answer carries (the engine's name for it)."""
    return Completion(
        token_ids=ids,
        tokens=TOKENS,
        logprobs=LOGPROBS,
        top_logprobs=TOP if top else None,
        text=TEXT,
        finish_reason="length",
        usage=usage,
        answer_id=answer_id,
    )


# each fixture's answer ``id``: kept as the record's ``answer_id`` (the first one a stream carries)
VLLM_CMPL, VLLM_CHAT = "cmpl-8f3c2a1e9b7d4c6a", "chatcmpl-2b9e0f6c1d8a4e37"
LLAMACPP = {"completions": "chatcmpl-Xq3Lr8Zt0aPb2Nc4Md6Ke9Jf", "chat": "chatcmpl-Vb7Nw2Qs5Rt8Yu1Io4Pa6Sd9"}


# --- vLLM ---------------------------------------------------------------------------------------


def test_vllm_completions_body() -> None:
    got = parse_body("completions", read("vllm_completions.json"))
    want = expected(ids=IDS, usage={**USAGE, "prompt_tokens_details": {"cached_tokens": 0}}, answer_id=VLLM_CMPL)
    want.prompt_token_ids = [151644, 8948, 198, 2610, 525, 264]  # return_token_ids: what a re-score sends back
    assert got == want


def test_vllm_completions_stream_equals_its_body() -> None:
    body = parse_body("completions", read("vllm_completions.json"))
    assert stream_completion("vllm_completions_stream.sse", "completions") == body


def test_vllm_chat_body_and_stream() -> None:
    body = parse_body("chat", read("vllm_chat.json"))
    assert body == expected(ids=IDS, usage={**USAGE, "prompt_tokens_details": None}, answer_id=VLLM_CHAT)
    assert stream_completion("vllm_chat_stream.sse", "chat") == expected(ids=IDS, usage=USAGE, answer_id=VLLM_CHAT)


def test_vllm_token_id_strings_give_ids_and_keep_the_strings() -> None:
    got = stream_completion("vllm_chat_stream_token_id_strings.sse", "chat", tokens_as_ids=True)
    assert got.token_ids == IDS
    assert got.tokens == [f"token_id:{i}" for i in IDS]
    assert got.logprobs == LOGPROBS
    assert got.top_logprobs is not None
    assert got.top_logprobs[3] == [("token_id:1787", -1.2034), ("token_id:1794", -1.2701)]
    assert got.text == TEXT


def test_token_id_strings_are_not_ids_unless_asked_for() -> None:
    got = stream_completion("vllm_chat_stream_token_id_strings.sse", "chat")
    assert got.token_ids is None
    assert got.tokens == [f"token_id:{i}" for i in IDS]


def test_vllm_error_inside_the_stream_raises_with_the_servers_message() -> None:
    with pytest.raises(StreamError, match="Internal server error") as info:
        run_stream("completions", [read("vllm_stream_error.sse")])
    assert info.value.server_message == "Internal server error"
    assert isinstance(info.value, MalformedResponse)


# --- llama.cpp ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind"), [("llamacpp_completions.json", "completions"), ("llamacpp_chat.json", "chat")]
)
def test_llamacpp_bodies_give_ids_from_logprobs(name: str, kind: Kind) -> None:
    assert parse_body(kind, read(name)) == expected(ids=IDS, usage=USAGE, answer_id=LLAMACPP[kind])


@pytest.mark.parametrize(
    ("name", "kind"), [("llamacpp_completions_stream.sse", "completions"), ("llamacpp_chat_stream.sse", "chat")]
)
def test_llamacpp_streams_give_ids_from_logprobs(name: str, kind: Kind) -> None:
    assert stream_completion(name, kind) == expected(ids=IDS, usage=USAGE, answer_id=LLAMACPP[kind])


def test_llamacpp_chat_role_chunk_is_not_a_token_and_usage_chunk_is_not_either() -> None:
    acc, carried = run_stream("chat", [read("llamacpp_chat_stream.sse")])
    # role chunk, 8 token chunks, finish chunk, usage chunk, [DONE]
    assert carried == [False, *[True] * 8, False, False, False]
    assert acc.done


def test_post_sampling_probs_are_converted_to_logprobs() -> None:
    chunk = {
        "choices": [
            {
                "text": "Hi",
                "index": 0,
                "finish_reason": None,
                "logprobs": {
                    "content": [
                        {
                            "id": 13048,
                            "token": "Hi",
                            "bytes": [72, 105],
                            "prob": 0.5,
                            "top_probs": [{"id": 9707, "token": "Hello", "bytes": [], "prob": 0.0}],
                        }
                    ]
                },
            }
        ]
    }
    acc = StreamAccumulator("completions")
    assert acc.add(orjson.dumps(chunk).decode())
    got = acc.finish()
    assert got.token_ids == [13048]
    assert got.logprobs is not None and math.isclose(got.logprobs[0], -0.6931471805599453)
    assert got.top_logprobs == [[("Hello", -9999.0)]]


# --- SGLang and TGI -----------------------------------------------------------------------------


def test_sglang_chat_stream_takes_ids_from_the_sglext_chunk() -> None:
    assert stream_completion("sglang_chat_stream_sglext.sse", "chat") == expected(
        ids=IDS, usage={**USAGE, "prompt_tokens_details": None}, answer_id="7c1f0e5a2b3d4c8e9f"
    )


def test_sglang_completions_stream_takes_per_chunk_token_ids() -> None:
    want = expected(ids=IDS, usage=USAGE, answer_id="3e8d1c7b5a")
    assert stream_completion("sglang_completions_stream.sse", "completions") == want


def test_tgi_chat_stream_has_tokens_but_no_ids() -> None:
    assert stream_completion("tgi_chat_stream.sse", "chat") == expected(ids=None, usage=USAGE)


def test_tgi_flat_string_error_raises() -> None:
    acc = StreamAccumulator("chat")
    with pytest.raises(StreamError, match="Request failed during generation"):
        acc.add('{"error":"Request failed during generation","error_type":"generation"}')


def test_flat_error_object_raises() -> None:
    with pytest.raises(StreamError, match="bad prompt"):
        parse_body("chat", b'{"object":"error","message":"bad prompt","type":"BadRequestError","code":400}')


# --- stream behaviour ---------------------------------------------------------------------------


def test_first_generated_token_is_signalled_once_per_token_chunk() -> None:
    acc, carried = run_stream("chat", [read("vllm_chat_stream.sse")])
    # role chunk ("" content), 7 content chunks (one holds two tokens), usage chunk, [DONE]
    assert carried == [False, *[True] * 7, False, False]
    assert acc.chunks == 9


def test_stream_without_done_is_not_done_but_keeps_what_arrived() -> None:
    raw = read("vllm_completions_stream.sse")
    cut = raw.index(b"data: ", raw.index(b'"text":" is open"'))  # drop from the chunk after " is open"
    acc, _ = run_stream("completions", [raw[:cut]])
    assert not acc.done
    got = acc.finish()
    assert got.token_ids == IDS[:4]
    assert got.text == "The café is open"
    assert got.finish_reason is None
    assert got.usage is None


def test_done_with_surrounding_space_counts() -> None:
    acc = StreamAccumulator("chat")
    assert acc.add(" [DONE] ") is False
    assert acc.done


@settings(max_examples=60, deadline=None)
@given(
    index=st.integers(min_value=0, max_value=len(STREAMS) - 1),
    crlf=st.booleans(),
    cut_fractions=st.lists(st.floats(min_value=0, max_value=1), max_size=30),
)
def test_any_chunking_gives_the_same_completion(index: int, crlf: bool, cut_fractions: list[float]) -> None:
    name, kind = STREAMS[index]
    raw = read(name)
    whole = stream_completion(name, kind)
    if crlf:
        raw = raw.replace(b"\n", b"\r\n")
    bounds = [0, *sorted({int(f * len(raw)) for f in cut_fractions}), len(raw)]
    acc, _ = run_stream(kind, [raw[a:b] for a, b in itertools.pairwise(bounds)])
    assert acc.done
    assert acc.finish() == whole


# --- legacy logprobs details --------------------------------------------------------------------


def legacy_body(logprobs: dict[str, object]) -> bytes:
    choice = {"index": 0, "text": "ab", "logprobs": logprobs, "finish_reason": "stop"}
    return orjson.dumps({"id": "c", "object": "text_completion", "choices": [choice]})


def test_alternatives_are_sorted_most_likely_first_ties_in_server_order() -> None:
    got = parse_body(
        "completions",
        legacy_body(
            {
                "tokens": ["a", "b"],
                "token_logprobs": [-0.5, -0.1],
                "top_logprobs": [{"x": -2.0, "a": -0.5, "y": -2.0}, {"b": -0.1}],
            }
        ),
    )
    assert got.top_logprobs == [[("a", -0.5), ("x", -2.0), ("y", -2.0)], [("b", -0.1)]]
    assert got.token_ids is None


def test_a_position_without_a_logprob_makes_logprobs_unavailable_not_zero() -> None:
    got = parse_body(
        "completions",
        legacy_body({"tokens": ["a", "b"], "token_logprobs": [None, -0.1], "top_logprobs": [None, {"b": -0.1}]}),
    )
    assert got.tokens == ["a", "b"]
    assert got.logprobs is None
    assert got.top_logprobs == [[], [("b", -0.1)]]


def test_no_logprobs_means_none_everywhere() -> None:
    got = parse_body("completions", orjson.dumps({"choices": [{"index": 0, "text": "ab", "finish_reason": "stop"}]}))
    assert got == Completion(None, None, None, None, "ab", "stop", None)


def test_only_choice_zero_is_read() -> None:
    body = {"choices": [{"index": 1, "text": "other"}, {"index": 0, "text": "mine", "finish_reason": "stop"}]}
    assert parse_body("completions", orjson.dumps(body)).text == "mine"


# --- malformed input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"<html>502 Bad Gateway</html>", "not JSON"),
        (b"[1, 2]", "not an object"),
        (b'{"id": "x"}', "lacks `choices`"),
        (b'{"choices": []}', "lacks `choices`"),
        (b'{"choices": [{"index": 0, "text": 5}]}', "not a string"),
        (b'{"choices": [{"index": 0, "text": "a", "token_ids": ["1"]}]}', "`token_ids`"),
        (b'{"choices": [{"index": 0, "text": "a", "logprobs": {"tokens": ["a"], "token_logprobs": []}}]}', "match"),
    ],
)
def test_malformed_bodies_raise_with_a_reason(body: bytes, reason: str) -> None:
    with pytest.raises(MalformedResponse, match=reason):
        parse_body("completions", body)


def test_malformed_stream_chunk_raises_naming_the_chunk() -> None:
    acc = StreamAccumulator("chat")
    acc.add('{"choices":[{"index":0,"delta":{"content":"a"}}]}')
    with pytest.raises(MalformedResponse, match="stream chunk 2 is not JSON"):
        acc.add('{"choices":[{"index":0,"delta":')


# --- x_batch_sizes (the embedded engine's batch sizes) ------------------------------------------


def sized_body(sizes: object, *, key: bool = True) -> bytes:
    body: dict[str, object] = {"choices": [{"index": 0, "text": "ab", "finish_reason": "length"}]}
    if key:
        body["x_batch_sizes"] = sizes
    return orjson.dumps(body)


def sized_stream(kind: Kind, sizes: object, *, own_chunk: bool = False, usage: bool = True) -> list[bytes]:
    """A stream of two tokens whose sizes ride on the finish chunk (or, ``own_chunk``, on a chunk of their own)."""

    def choice(text: str, finish: str | None) -> dict[str, object]:
        if kind == "chat":
            return {"index": 0, "delta": {"content": text}, "finish_reason": finish}
        return {"index": 0, "text": text, "finish_reason": finish}

    chunks: list[dict[str, object]] = []
    if kind == "chat":
        chunks.append({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    chunks.append({"choices": [choice("a", None)]})
    last: dict[str, object] = {"choices": [choice("b", "length")]}
    if own_chunk:
        chunks += [last, {"x_batch_sizes": sizes}]
    else:
        chunks.append({**last, "x_batch_sizes": sizes})
    if usage:
        chunks.append({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}})
    return [b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]


def test_batch_sizes_are_read_from_a_body() -> None:
    assert parse_body("completions", sized_body([3, 4, 4])).batch_sizes == [3, 4, 4]


@pytest.mark.parametrize("body", [sized_body(None, key=False), sized_body(None)])
def test_absent_batch_sizes_are_none(body: bytes) -> None:
    assert parse_body("completions", body).batch_sizes is None


@pytest.mark.parametrize("kind", ["completions", "chat"])
@pytest.mark.parametrize("own_chunk", [False, True])
def test_batch_sizes_are_read_from_a_stream(kind: Kind, own_chunk: bool) -> None:
    acc, carried = run_stream(kind, sized_stream(kind, [2, 3], own_chunk=own_chunk))
    assert acc.done
    got = acc.finish()
    assert got.batch_sizes == [2, 3]
    assert got.text == "ab" and got.finish_reason == "length" and got.usage is not None
    assert carried.count(True) == 2  # a chunk of sizes alone carries no token


def test_a_chunk_of_sizes_alone_is_accepted() -> None:
    acc = StreamAccumulator("completions")
    assert acc.add('{"x_batch_sizes": [1, 1]}') is False
    assert acc.finish().batch_sizes == [1, 1]


def test_a_stream_without_sizes_has_none() -> None:
    acc, _ = run_stream("chat", [read("vllm_chat_stream.sse")])
    assert acc.finish().batch_sizes is None


BAD_SIZES: list[object] = [
    *(3, "3", True, {"0": 1}),  # not a list
    *([0], [-1], [2, 0]),  # not positive
    *([(1 << 20) + 1], [3, 1 << 40], [1 << 63]),  # no engine's batch: above 2^20 sequences
    *([True], [False], [1.0], [2.5], ["2"], [None], [[1]]),  # not whole numbers
]


@pytest.mark.parametrize("sizes", BAD_SIZES, ids=repr)
def test_malformed_batch_sizes_in_a_body_raise(sizes: object) -> None:
    with pytest.raises(MalformedResponse, match="x_batch_sizes"):
        parse_body("completions", sized_body(sizes))


@pytest.mark.parametrize("own_chunk", [False, True])
@pytest.mark.parametrize("sizes", BAD_SIZES, ids=repr)
def test_malformed_batch_sizes_in_a_stream_raise(sizes: object, own_chunk: bool) -> None:
    with pytest.raises(MalformedResponse, match="x_batch_sizes"):
        run_stream("chat", sized_stream("chat", sizes, own_chunk=own_chunk))


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=1 << 20), min_size=1, max_size=64),
    kind=st.sampled_from(["completions", "chat"]),
    own_chunk=st.booleans(),
    usage=st.booleans(),
)
def test_any_positive_sizes_round_trip(sizes: list[int], kind: Kind, own_chunk: bool, usage: bool) -> None:
    assert parse_body("completions", sized_body(sizes)).batch_sizes == sizes
    acc, _ = run_stream(kind, sized_stream(kind, sizes, own_chunk=own_chunk, usage=usage))
    assert acc.finish().batch_sizes == sizes
