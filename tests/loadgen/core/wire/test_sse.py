"""SSEDecoder: the same events whatever the chunking, line endings and UTF-8 splits."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core.wire.sse import SSEDecoder, SSEEvent

FIXTURES = Path(__file__).parent / "fixtures"
TRANSCRIPTS = ["vllm_completions_stream.sse", "llamacpp_chat_stream.sse", "tgi_chat_stream.sse"]


def decode(chunks: list[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events + decoder.flush()


def split_at(raw: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(set(cuts)), len(raw)]
    return [raw[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.fixture(scope="module", params=TRANSCRIPTS)
def transcript(request: pytest.FixtureRequest) -> bytes:
    name: str = request.param
    return (FIXTURES / name).read_bytes()


def test_transcript_decodes_to_its_data_lines(transcript: bytes) -> None:
    events = decode([transcript])
    expected = [line[6:] for line in transcript.decode().split("\n") if line.startswith("data: ")]
    assert [e.data for e in events] == expected
    assert events[-1] == SSEEvent("[DONE]")


def test_every_single_split_offset_gives_the_same_events(transcript: bytes) -> None:
    whole = decode([transcript])
    for offset in range(len(transcript) + 1):
        assert decode([transcript[:offset], transcript[offset:]]) == whole, offset


def test_byte_at_a_time_gives_the_same_events(transcript: bytes) -> None:
    assert decode([transcript[i : i + 1] for i in range(len(transcript))]) == decode([transcript])


@pytest.mark.parametrize("ending", [b"\r\n", b"\r"])
def test_crlf_and_cr_line_endings_give_the_same_events(transcript: bytes, ending: bytes) -> None:
    converted = transcript.replace(b"\n", ending)
    whole = decode([transcript])
    assert decode([converted]) == whole
    for offset in range(len(converted) + 1):
        assert decode([converted[:offset], converted[offset:]]) == whole, offset


@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from(TRANSCRIPTS),
    ending=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    cut_fractions=st.lists(st.floats(min_value=0, max_value=1), max_size=40),
)
def test_random_chunkings_give_the_same_events(name: str, ending: bytes, cut_fractions: list[float]) -> None:
    raw = (FIXTURES / name).read_bytes()
    reference = decode([raw])
    converted = raw.replace(b"\n", ending)
    cuts = [int(f * len(converted)) for f in cut_fractions]
    assert decode(split_at(converted, cuts)) == reference


def test_cr_ending_one_chunk_pairs_with_lf_opening_the_next() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n\r") == [SSEEvent("a")]
    assert decoder.feed(b"\ndata: b\r\r") == [SSEEvent("b")]
    assert decoder.flush() == []


def test_crlf_multiline_event_split_anywhere_stays_one_event() -> None:
    raw = b"event: e\r\nid: 1\r\ndata: a\r\ndata: b\r\n\r\n"
    for offset in range(len(raw) + 1):
        assert decode([raw[:offset], raw[offset:]]) == [SSEEvent("a\nb", "e", "1")], offset


def test_two_crs_are_two_line_ends() -> None:
    assert decode([b"data: a\r\rdata: b\r\r"]) == [SSEEvent("a"), SSEEvent("b")]


def test_comments_are_ignored() -> None:
    assert decode([b": keep-alive\n\n:\n\ndata: x\n: between\n\n"]) == [SSEEvent("x")]


def test_multiline_data_joins_with_lf_and_one_leading_space_is_stripped() -> None:
    raw = b"data: a\ndata:b\ndata:  c\ndata\ndata:\n\n"
    assert decode([raw]) == [SSEEvent("a\nb\n c\n\n")]


def test_event_and_id_fields() -> None:
    raw = b"event: sglext_ids\nid: 7\ndata: x\n\ndata: y\n\nid\ndata: z\n\n"
    assert decode([raw]) == [SSEEvent("x", "sglext_ids", "7"), SSEEvent("y", None, "7"), SSEEvent("z", None, "")]


def test_an_event_without_data_is_not_dispatched_and_its_type_is_reset() -> None:
    assert decode([b"event: ping\n\ndata: x\n\n"]) == [SSEEvent("x")]


def test_unknown_fields_and_retry_are_ignored() -> None:
    assert decode([b"retry: 10\nfoo: bar\ndata: x\n\n"]) == [SSEEvent("x")]


def test_truncated_tail_is_returned_by_flush_only() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"a":1}\n\ndata: {"b"') == [SSEEvent('{"a":1}')]
    assert decoder.flush() == [SSEEvent('{"b"')]
    assert decoder.flush() == []


def test_terminated_line_without_blank_line_is_returned_by_flush() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: [DONE]\n") == []
    assert decoder.flush() == [SSEEvent("[DONE]")]


def test_clean_end_flushes_nothing() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\n\n") == [SSEEvent("x")]
    assert decoder.flush() == []


def test_utf8_split_inside_a_character_is_decoded_whole() -> None:
    raw = "data: café 🎉\n\n".encode()
    for offset in range(len(raw) + 1):
        assert decode([raw[:offset], raw[offset:]]) == [SSEEvent("café 🎉")], offset


def test_invalid_utf8_becomes_replacement_characters() -> None:
    assert decode([b"data: a\xffb\n\n"]) == [SSEEvent("a\ufffdb")]


@pytest.mark.parametrize("offset", range(5))
def test_leading_bom_is_dropped_even_when_split(offset: int) -> None:
    raw = b"\xef\xbb\xbfdata: x\n\n"
    assert decode([raw[:offset], raw[offset:]]) == [SSEEvent("x")]


def test_empty_feeds_change_nothing() -> None:
    assert decode([b"", b"data: x", b"", b"\n", b"", b"\n"]) == [SSEEvent("x")]
