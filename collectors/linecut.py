"""Cut one canary record line into its head and its token sequences, so the sequences are parsed as
bytes instead of as a tree of Python objects.

Why: a 128-token record with top-2 alternatives is about 13 KB, and parsing it whole with orjson builds
about a thousand objects (most for ``top_logprobs``: a list per position and per alternative, a string and
a float each), which is most of a big run folder's read time (docs/design.md, "run folder"). The
writer's lines keep the record's field order, so ``token_ids``, ``tokens``, ``logprobs`` and
``top_logprobs`` sit side by side before ``text``: one slice each, the rest (the head) parsed as a small
object. ``top_logprobs`` becomes one flat list of numbers and the number of alternatives per position,
read from the bytes between the token strings.

Proof, not trust: ``cut`` returns None unless the line is provably in that shape, and the caller then
parses the whole line (``collectors.fastcolumns``). A key spelled ``,"name":`` is a key in any valid JSON
(its quote follows a comma, so it is not escaped); the head is parsed with a marker in place of the four
fields, and the marker must come back as the top-level ``token_ids`` (so the slices are the record's own,
not a nested object's); every slice is parsed or checked as one complete JSON value, and the
alternatives' token strings are checked as JSON strings (escapes, control characters, UTF-8). A line that
is not valid JSON therefore never passes. Pure: no I/O, no numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import orjson

KEYS = (b',"token_ids":', b',"tokens":', b',"logprobs":', b',"top_logprobs":', b',"text":')
_MARK = b',"token_ids":"\\u0000"'  # stands for the four fields in the head; never in a line that passes
_MARK_VALUE = "\x00"
_SEQUENCES = ("tokens", "logprobs", "top_logprobs")
_NUMBER_BYTES = b"0123456789.-+eE"
_CLOSE_TO_COMMA = bytes.maketrans(b"]", b",")


@dataclass(slots=True)
class Cut:
    """A record line in parts: the parsed head (every field but the four below) and each field's value bytes."""

    head: dict[str, Any]
    token_ids: bytes
    tokens: bytes
    logprobs: bytes
    top_logprobs: bytes


def cut(line: bytes) -> Cut | None:
    """The line in parts, or None when it is not provably a record in the writer's field order."""
    ids = line.find(KEYS[0])
    tokens = line.find(KEYS[1], ids)
    logprobs = line.find(KEYS[2], tokens)
    top = line.find(KEYS[3], logprobs)
    text = line.rfind(KEYS[4], top)  # from the end: the alternatives, the longest field, are not scanned for it
    if min(ids, tokens, logprobs, top) < 0 or text <= top:
        return None
    head_bytes = line[:ids] + _MARK + line[text:]
    if head_bytes.count(b"\\u0000") != 1:  # the marker must be ours alone
        return None
    try:
        head = orjson.loads(head_bytes)
    except orjson.JSONDecodeError:
        return None
    if type(head) is not dict or head.get("token_ids") != _MARK_VALUE or any(k in head for k in _SEQUENCES):
        return None
    del head["token_ids"]
    return Cut(
        head,
        line[ids + len(KEYS[0]) : tokens],
        line[tokens + len(KEYS[1]) : logprobs],
        line[logprobs + len(KEYS[2]) : top],
        line[top + len(KEYS[3]) : text],
    )


@dataclass(slots=True)
class Alternatives:
    """One record's ``top_logprobs`` as numbers: every alternative's logprob, position by position, and the
    number of alternatives at each position. Equals ``[alt[1] for pos in top for alt in pos]`` and
    ``[len(pos) for pos in top]`` of the parsed value."""

    positions: int
    values: list[Any]
    widths: list[int]


def alternatives(value: bytes) -> Alternatives | None:
    """``top_logprobs`` value bytes as numbers when every position holds the same number of ``[string,
    number]`` pairs and nothing else (no whitespace, no null); None otherwise (the caller parses it)."""
    plain = value.replace(b"\\\\", b"__").replace(b'\\"', b"__") if b"\\" in value else value
    pieces = plain.split(b'"')  # every quote is a string's end now: escaped quotes and backslashes are gone
    strings = len(pieces) // 2
    if len(pieces) % 2 == 0 or not strings:
        return None
    outside = b"".join(pieces[0::2])
    skeleton = outside.translate(None, _NUMBER_BYTES)
    end = skeleton.find(b"]]")  # the first position is "[" + width pairs "[,]" joined by "," + "]", after "["
    width = end // 4 if end > 0 and end % 4 == 0 else 0
    if not width or strings % width or skeleton != _skeleton(strings // width, width):
        return None
    # "[[[,v1],[,v2]],[[,v3],[,v4]]]" -> "v1,v2,,v3,v4,,,": a comma after each number, doubled where a position ends
    flat = outside.translate(_CLOSE_TO_COMMA, b"[,").replace(b",,", b",").rstrip(b",")
    try:
        numbers = orjson.loads(b"[" + flat + b"]")
        orjson.loads(b'"' + b"".join(pieces[1::2]) + b'"')  # the token strings are valid JSON strings
    except orjson.JSONDecodeError:
        return None
    if len(numbers) != strings:
        return None
    return Alternatives(strings // width, numbers, [width] * (strings // width))


@cache
def _skeleton(positions: int, width: int) -> bytes:
    """``top_logprobs`` bytes of ``positions`` positions of ``width`` pairs, strings and numbers removed."""
    return b"[" + b",".join([b"[" + b",".join([b"[,]"] * width) + b"]"] * positions) + b"]"
