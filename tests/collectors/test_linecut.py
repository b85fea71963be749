"""``collectors.read.linecut``: a cut line reassembles to what parsing the whole line gives, and no line that is
not valid JSON is ever cut into parts that all parse.

Lines come from real ``CanaryRecord`` objects serialised as the writer does, with token strings of any
characters (quotes, backslashes, control characters, non-ASCII) and alternatives of every shape; then
with one byte replaced, often by one that matters to JSON.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from collectors.read.linecut import cut
from loadgen.core.record import CanaryRecord

token = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=5)
logprob = st.one_of(
    st.floats(min_value=-40, max_value=0),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(2**63), 2**64 - 1),  # what the writer (orjson) can write
    st.none(),
)
pair = st.tuples(token, logprob).map(list)
uniform = st.integers(1, 3).flatmap(lambda w: st.lists(st.lists(pair, min_size=w, max_size=w), max_size=6))
anything: Any = st.recursive(
    st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False), st.integers(-5, 5), token),
    lambda inner: st.lists(inner, max_size=3),
    max_leaves=12,
)


def line_of(top: Any, tokens: list[str] | None = None, text: str | None = "x") -> bytes:
    n = len(top) if isinstance(top, list) else 2
    rec = CanaryRecord(
        run_id="r",
        canary_id="c",
        request_id="q",
        phase="sweep",
        level=1,
        inflight_at_send=0,
        sent_at=1.7e9,
        status="ok",
        request={"prompt": "p", "logprobs": 2, "top_logprobs": 2},  # the same names, one level down
        token_ids=list(range(n)),
        tokens=tokens if tokens is not None else ["t"] * n,
        logprobs=[-0.5] * n,
        text=text,
    ).to_dict()
    rec["top_logprobs"] = top
    return orjson.dumps(rec)


def assert_reassembles(line: bytes) -> None:
    parts = cut(line)
    assert parts is not None
    whole = orjson.loads(line)
    again = dict(parts.head)
    for name in ("token_ids", "tokens", "logprobs", "top_logprobs"):
        again[name] = orjson.loads(getattr(parts, name))
    assert again == whole


@settings(max_examples=300, deadline=None)
@given(top=st.one_of(uniform, st.lists(anything, max_size=4), anything), tokens=st.lists(token, max_size=4))
@example(top=[[["\\", -1.0], ['"', -2.0]]], tokens=['\\"', "\\\\", '"'])
@example(top=[[["]]],[[", -1.0], [",-1]", -2.0]]], tokens=['","tokens":'])
def test_a_writer_line_is_cut_into_the_parts_it_was_made_of(top: Any, tokens: list[str]) -> None:
    assert_reassembles(line_of(top, tokens))


@settings(max_examples=500, deadline=None)
@given(
    top=uniform,
    tokens=st.lists(token, max_size=4),
    at=st.floats(0, 1, exclude_max=True),
    byte=st.sampled_from([b'"', b"\\", b"[", b"]", b",", b"0", b"-", b"e", b"n", b"{", b"}", b":", b"\x01", b"\xff"]),
)
def test_a_line_with_one_byte_changed_is_cut_only_when_it_is_still_valid_json(
    top: Any, tokens: list[str], at: float, byte: bytes
) -> None:
    line = line_of(top, tokens)
    i = int(at * len(line))
    bad = line[:i] + byte + line[i + 1 :]
    parts = cut(bad)
    if parts is None:
        return
    try:
        values = [orjson.loads(getattr(parts, k)) for k in ("token_ids", "tokens", "logprobs", "top_logprobs")]
    except orjson.JSONDecodeError:
        return  # the reader parses the whole line then
    whole = orjson.loads(bad)  # raises if a line that is not JSON was cut and all its parts parsed
    assert [whole.pop(k) for k in ("token_ids", "tokens", "logprobs", "top_logprobs")] == values
    assert whole == parts.head


def test_lines_not_in_the_writers_shape_are_not_cut() -> None:
    line = line_of([[["a", -1.0]]])
    rec = orjson.loads(line)
    assert cut(orjson.dumps(dict(reversed(rec.items())))) is None  # another key order
    del rec["text"]
    assert cut(orjson.dumps(rec)) is None  # a field missing
    marker = line_of([[["\x00", -1.0]]], text="\x00")  # the cut's own marker inside the record
    assert cut(marker) is None
    nested = orjson.loads(line)
    nested["request"] = {k: nested[k] for k in ("token_ids", "tokens", "logprobs", "top_logprobs", "text")}
    for k in ("token_ids", "tokens", "logprobs", "top_logprobs"):
        del nested[k]
    assert cut(orjson.dumps(nested)) is None  # the sequence keys only inside the request
