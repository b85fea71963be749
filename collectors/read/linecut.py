"""Cut one canary record line into its head and its four token sequences, so that each distinct
sequence value is parsed once and the rest of the line is parsed as a small object.

Why: a 128-token record with top-2 alternatives is about 13 KB, and most of a big run folder's read
time is parsing those sequences (docs/design.md, "run folder"). Canary records repeat: an invariant
engine gives the same completion, logprobs and alternatives every time, so the reader
(``collectors.read.fastcolumns``) keeps each value's bytes and parses a repeated one only once. The
writer's lines keep the record's field order, so ``token_ids``, ``tokens``, ``logprobs`` and
``top_logprobs`` sit side by side before ``text``: one slice each.

Proof, not trust: ``cut`` returns None unless the line is provably in that shape, and the caller then
parses the whole line. A key spelled ``,"name":`` is a key in any valid JSON (its quote follows a
comma, so it is not escaped); the head is parsed with a marker in place of the four fields, and the
marker must come back as the top-level ``token_ids`` (so the slices are the record's own, not a
nested object's). The caller parses every slice as one complete JSON value, so a line that is not
valid JSON never passes as a record. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

KEYS = (b',"token_ids":', b',"tokens":', b',"logprobs":', b',"top_logprobs":', b',"text":')
_MARK = b',"token_ids":"\\u0000"'  # stands for the four fields in the head; never in a line that passes
_MARK_VALUE = "\x00"
_SEQUENCES = ("tokens", "logprobs", "top_logprobs")


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
