"""An answer of n choices to one prompt is split by choice index, completions and chat alike."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.wire.batch import parse_batch
from loadgen.core.wire.types import Completion, Kind, MalformedResponse


def _choice(kind: Kind, index: int, text: str) -> dict[str, object]:
    part: dict[str, object] = {"index": index, "finish_reason": "length", "token_ids": [index, len(text)]}
    return (
        {**part, "text": text} if kind == "completions" else {**part, "message": {"role": "assistant", "content": text}}
    )


@given(kind=st.sampled_from(["completions", "chat"]), texts=st.lists(st.text(min_size=1), min_size=2, max_size=6))
def test_each_choice_lands_at_its_index_whatever_order_they_come_in(kind: Kind, texts: list[str]) -> None:
    choices = [_choice(kind, i, t) for i, t in enumerate(texts)]
    body = orjson.dumps({"choices": list(reversed(choices)), "usage": {"prompt_tokens": 3}})
    parts = parse_batch(kind, body, len(texts))
    assert all(isinstance(p, Completion) for p in parts)
    assert [p.text for p in parts if isinstance(p, Completion)] == texts
    assert [p.token_ids for p in parts if isinstance(p, Completion)] == [[i, len(t)] for i, t in enumerate(texts)]


def test_a_missing_or_repeated_choice_is_a_malformed_answer() -> None:
    body = orjson.dumps({"choices": [_choice("chat", 0, "a"), _choice("chat", 0, "b")]})
    with pytest.raises(MalformedResponse, match="each once"):
        parse_batch("chat", body, 2)
