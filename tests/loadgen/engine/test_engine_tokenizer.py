"""Tokenizer: every string round-trips; known words are single tokens; the rest falls back to bytes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loadgen.engine.tokenizer import BYTE_BASE, load_tokenizer


@given(st.text(max_size=200))
def test_any_text_round_trips(text: str) -> None:
    tok = load_tokenizer()
    assert tok.decode(tok.encode(text)) == text


def test_words_are_single_tokens_and_unknowns_are_bytes() -> None:
    tok = load_tokenizer()
    ids = tok.encode("The river, Zyx")
    pieces = [tok.token_text(i) for i in ids]
    assert pieces[:3] == ["The", " river", ","]
    assert all(BYTE_BASE <= i < BYTE_BASE + 256 for i in ids[3:])
    assert len(ids) == 3 + len(" Zyx")
    assert 2000 < tok.vocab_size < 5000
