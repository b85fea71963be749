"""Completion identity per completion: the one rule the report, the live table and cold boots share.

docs/design.md: token ids, else token strings, else text, chosen per canary over its completions and
declared in the report, never mixed silently: if even one completion lacks ids, the whole canary is
compared by token strings, and the report says how many had each. With text identity, positions are
characters (Unicode code points). The first divergence of two completions is the first position
where they differ, the shorter length when one is a strict prefix of the other, none when equal.
The reference a canary's completions are compared with is the modal completion, the earliest first
on a tie (``reference_index``).

This is the per-completion form, for code that sees records one at a time (the Locust process's live
table, cold boots); ``reports.analysis.identity`` applies the same rules over a padded matrix. Pure: no I/O,
no numpy, no pandas.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any, Literal

import orjson

IdentityKind = Literal["token_ids", "tokens", "text"]
KINDS: tuple[IdentityKind, ...] = ("token_ids", "tokens", "text")  # strongest first
Completion = tuple[Any, ...]  # one completion under one identity kind

END = None  # a fork "token" where the sequence had already ended


def choose_kind(completions: int, with_ids: int, with_tokens: int) -> IdentityKind:
    """The strongest identity every one of ``completions`` carried (the rule, in one place)."""
    if completions and with_ids == completions:
        return "token_ids"
    if completions and with_tokens == completions:
        return "tokens"
    return "text"


def identities(
    token_ids: Sequence[int] | None, tokens: Sequence[str] | None, text: str | None
) -> dict[IdentityKind, Completion]:
    """One completion under every identity it carries (text always: a missing text is the empty one)."""
    out: dict[IdentityKind, Completion] = {}
    if token_ids is not None:
        out["token_ids"] = tuple(token_ids)
    if tokens is not None:
        out["tokens"] = tuple(tokens)
    out["text"] = tuple(text or "")
    return out


def identity_hash(seq: Completion) -> str:
    """A short stable digest of one completion under one kind (for messages between processes)."""
    return hashlib.blake2b(orjson.dumps(list(seq)), digest_size=8).hexdigest()


def first_divergence(a: Completion, b: Completion) -> int | None:
    """The first index where they differ; the shorter length for a strict prefix; None if equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def reference_index(labels: Sequence[Hashable]) -> int | None:
    """Which completion is the reference (the rule, in one place): the modal one, the earliest first on a tie.

    ``labels``: one per completion, in the order they were sent, equal exactly where the completions are
    equal (the completion itself, a hash of it, a group number). The index of the reference's first
    occurrence; None when there is no completion."""
    counts = Counter(labels)
    if not counts:
        return None
    top = max(counts.values())
    return next(i for i, label in enumerate(labels) if counts[label] == top)
