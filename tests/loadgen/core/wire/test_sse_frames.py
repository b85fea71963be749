"""FrameReader (background streams) against the canary's full parse (SSEDecoder + StreamAccumulator).

On the same bytes, in any chunking, both must give the same status (ok, truncated, malformed, the server's
error with its message), the same usage, and the first token in the same piece of the body with the same
progress counts after every piece: captured transcripts of real servers, cut short anywhere, and generated
streams with errors, garbage and non-object frames mixed in.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core.wire import Kind, MalformedResponse, StreamAccumulator, StreamError
from loadgen.core.wire.sse import SSEDecoder
from loadgen.core.wire.sse_frames import FrameReader

FIXTURES = Path(__file__).parent / "fixtures"
TRANSCRIPTS: dict[str, Kind] = {
    "vllm_completions_stream.sse": "completions",
    "vllm_chat_stream.sse": "chat",
    "vllm_chat_stream_token_id_strings.sse": "chat",
    "vllm_stream_error.sse": "completions",
    "sglang_completions_stream.sse": "completions",
    "sglang_chat_stream_sglext.sse": "chat",
    "llamacpp_completions_stream.sse": "completions",
    "llamacpp_chat_stream.sse": "chat",
    "tgi_chat_stream.sse": "chat",
    "vllm-0.26-h200/default-completion-stream.txt": "completions",
}


@dataclass(frozen=True)
class Seen:
    status: str  # ok, truncated_stream, malformed_body, stream_error
    message: str | None  # the server's words for a stream_error
    usage: dict[str, Any] | None
    first_token_piece: int | None  # index of the piece that completed the first token-carrying event
    progress: tuple[int, ...]  # events counted (from the first token on) after each piece


def canary_path(pieces: list[bytes], kind: Kind) -> Seen:
    """What ``loadgen.load.client._read_stream`` makes of the pieces: every event decoded and parsed."""
    decoder, acc = SSEDecoder(), StreamAccumulator(kind)
    tokens, first, progress = 0, None, []
    try:
        for i, piece in enumerate(pieces):
            for event in decoder.feed(piece):
                carried = acc.add(event.data)
                if carried and first is None:
                    first = i
                if carried or tokens:
                    tokens += 1
            progress.append(tokens)
        for event in decoder.flush():
            acc.add(event.data)
    except StreamError as exc:
        return Seen("stream_error", exc.server_message, None, first, tuple(progress))
    except MalformedResponse:
        return Seen("malformed_body", None, None, first, tuple(progress))
    status = "ok" if acc.done else "truncated_stream"
    return Seen(status, None, acc.finish().usage, first, tuple(progress))


def frame_path(pieces: list[bytes], kind: Kind) -> Seen:
    """What ``loadgen.load.client._read_frames`` makes of them."""
    reader, first, progress = FrameReader(kind), None, []
    try:
        for i, piece in enumerate(pieces):
            try:
                if reader.feed(piece) and first is None:
                    first = i
            finally:  # as the client does: a first token in the piece that raised still times ttft_s
                if reader.counted and first is None:
                    first = i
            progress.append(reader.counted)
        summary = reader.finish()
    except StreamError as exc:
        return Seen("stream_error", exc.server_message, None, first, tuple(progress))
    except MalformedResponse:
        return Seen("malformed_body", None, None, first, tuple(progress))
    return Seen("ok" if summary.done else "truncated_stream", None, summary.usage, first, tuple(progress))


def assert_same(pieces: list[bytes], kind: Kind) -> Seen:
    full, frames = canary_path(pieces, kind), frame_path(pieces, kind)
    if full.status in ("stream_error", "malformed_body"):
        # the canary stops at the bad event; the reader may have counted past it in the same piece
        assert (frames.status, frames.message) == (full.status, full.message)
        assert frames.first_token_piece == full.first_token_piece
    else:
        assert frames == full
    return full


def split_at(raw: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(set(cuts)), len(raw)]
    return [raw[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_transcripts_whole_and_per_line(name: str) -> None:
    raw = (FIXTURES / name).read_bytes()
    kind = TRANSCRIPTS[name]
    whole = assert_same([raw], kind)
    expected = "stream_error" if "error" in name else "ok"
    assert whole.status == expected
    assert_same(raw.splitlines(keepends=True), kind)
    assert_same(raw.replace(b"\n", b"\r\n").splitlines(keepends=True), kind)


@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_transcripts_cut_short_anywhere(name: str) -> None:
    """A connection that dies mid-stream: truncated, or malformed where the cut leaves half a frame."""
    raw = (FIXTURES / name).read_bytes()
    statuses = set()
    for end in range(0, len(raw), max(1, len(raw) // 150)):
        statuses.add(assert_same([raw[:end]], TRANSCRIPTS[name]).status)
    assert "truncated_stream" in statuses


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(TRANSCRIPTS)), cuts=st.lists(st.integers(0, 20000), max_size=40))
def test_transcripts_in_random_chunkings(name: str, cuts: list[int]) -> None:
    raw = (FIXTURES / name).read_bytes()
    assert_same(split_at(raw, [c % (len(raw) + 1) for c in cuts]), TRANSCRIPTS[name])


# -- generated streams: token chunks, role chunks, usage, errors and garbage, in any order -----------

_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="{}"), max_size=6)


def _chunk(kind: Kind, text: str, *, finish: str | None = None, usage: Any = None) -> bytes:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
    if kind == "chat":
        choice["delta"] = {"content": text}
    else:
        choice["text"] = text
    head = {"id": "cmpl-x", "object": "chunk", "model": "m/generated-for-this-test", "choices": [choice]}
    return orjson.dumps({**head, "usage": usage})


def _usage(n: int) -> bytes:
    return orjson.dumps({"id": "x", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n}})


FRAMES = st.one_of(
    st.builds(lambda t: ("token", t), _TEXT),
    st.just(("role", "")),
    st.integers(0, 500).map(lambda n: ("usage", n)),
    st.sampled_from(
        [
            ("raw", b'{"error":{"message":"overloaded","code":503}}'),
            ("raw", b'{"object":"error","message":"engine died"}'),
            ("raw", b'{"id":"cmpl-x","choices":[],"error":{"message":"a failure beside an empty choices list"}}'),
            ("raw", b'{"id":"cmpl-x","object":"error","choices":[],"message":"an error object with choices"}'),
            ("raw", b"not json at all, but long enough to pass the short-frame rule of the reader"),
            ("raw", b'[{"choices":[]}, "an array is not an object, even one that is long enough"]'),
            ("raw", b'{"id":"cmpl-x","object":"chunk","model":"m","note":"an object with no choices"}'),
            ("raw", b'{"id":"cmpl-x","choices":[{"index":0,"text":"cut short here","finish_reason":null}'),
            ("raw", b""),
            ("raw", b"[DONE]"),
            ("raw", b" [DONE] "),
            ("raw", b": a comment line, not data"),
            ("raw", b'{"id":"x","choices":[{"index":0,"text":"\xff\xfe invalid utf-8 in a token"}],"usage":null}'),
        ]
    ),
)


def _render(kind: Kind, frames: list[tuple[str, Any]], done: bool) -> bytes:
    parts = []
    for what, value in frames:
        if what == "token":
            parts.append(b"data: " + _chunk(kind, value) + b"\n\n")
        elif what == "role":
            role = {"id": "x", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
            parts.append(b"data: " + orjson.dumps(role) + b"\n\n")
        elif what == "usage":
            parts.append(b"data: " + _usage(value) + b"\n\n")
        elif value.startswith(b":"):
            parts.append(value + b"\n")
        else:
            parts.append(b"data: " + value + b"\n\n")
    if done:
        parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(["completions", "chat"]),
    frames=st.lists(FRAMES, max_size=25),
    done=st.booleans(),
    cuts=st.lists(st.integers(0, 5000), max_size=30),
    end=st.none() | st.integers(0, 5000),
    crlf=st.booleans(),
)
def test_generated_streams_in_random_chunkings(
    kind: Kind, frames: list[tuple[str, Any]], done: bool, cuts: list[int], end: int | None, crlf: bool
) -> None:
    raw = _render(kind, frames, done)
    if crlf:
        raw = raw.replace(b"\n", b"\r\n")
    if end is not None:
        raw = raw[: end % (len(raw) + 1)]  # the connection died here
    assert_same(split_at(raw, [c % (len(raw) + 1) for c in cuts]), kind)


def test_plain_token_chunks_are_counted_without_being_parsed() -> None:
    """After the first token, a chunk that cannot change the outcome is counted, never parsed: a chunk whose
    ``choices`` is not a list (which the canary's parse rejects) is counted like any other."""
    first = _chunk("completions", "a")
    odd = b'{"id":"cmpl-x","object":"chunk","model":"m/generated-for-this-test","choices":"not a list"}'
    raw = b"data: " + first + b"\n\ndata: " + odd + b"\n\ndata: " + _usage(2) + b"\n\ndata: [DONE]\n\n"
    assert canary_path([raw], "completions").status == "malformed_body"
    reader = FrameReader("completions")
    assert reader.feed(raw) == 4
    summary = reader.finish()
    assert summary.done and summary.usage == {"prompt_tokens": 3, "completion_tokens": 2}


def test_first_token_after_role_chunks_starts_the_count() -> None:
    role = b'{"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'
    reader = FrameReader("chat")
    assert reader.feed(b"data: " + role + b"\n\n") == 0
    assert reader.feed(b"data: " + _chunk("chat", "hi") + b"\n\n") == 1
    assert reader.feed(b"data: " + _chunk("chat", "") + b"\n\ndata: [DONE]\n\n") == 2
    assert reader.finish().counted == 3


@pytest.mark.parametrize(
    "odd",
    [
        b'{"id":"cmpl-x","choices":[{"index":0,"text":"cut short here","finish_reason":null}',
        b'{"id":"cmpl-x","choices":[],"error":{"message":"failed in the middle of a run of chunks"}}',
        b'{"id":"cmpl-x","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}',
        b'{"id":"cmpl-x","object":"chunk","model":"m/generated-for-this-test","note":"no choices here at all"}',
    ],
)
@pytest.mark.parametrize("kind", ["completions", "chat"])
def test_a_frame_that_matters_inside_a_run_read_at_once(odd: bytes, kind: Kind) -> None:
    """A client behind the server reads many frames per piece: the frame that matters in the middle of a run of
    plain chunks is found as the canary finds it."""
    tokens = [b"data: " + _chunk(kind, f"t{i}") + b"\n\n" for i in range(6)]
    run = b"".join([*tokens[1:3], b"data: " + odd + b"\n\n", *tokens[3:]])
    seen = assert_same([tokens[0], run, b"data: [DONE]\n\n"], kind)
    assert seen.status == ("ok" if b"usage" in odd else "stream_error" if b"error" in odd else "malformed_body")
