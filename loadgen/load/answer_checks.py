"""What is kept of an untrusted endpoint's answer: only a completion the request could have produced, with
the API key taken out of it.

Why: the endpoint is not trusted (docs/faults-and-secrets.md). A completion with impossible token ids
or more tokens than asked for would poison the comparison (readers pad id matrices with -1 and keep ids
in fixed-width integers), and a server may echo the ``Authorization`` header into its answer, which
the run folder keeps. ``loadgen.load.client`` applies both checks to every answer it parses. Pure: no
I/O, no gevent.
"""

from __future__ import annotations

from loadgen.core.errors import REDACTED, redact
from loadgen.core.wire import Completion

TOKEN_ID_LIMIT = 2**31  # no vocabulary comes near; readers pad id matrices with -1 and keep ids in int32/int64


def completion_problem(completion: Completion, max_tokens: int | None) -> str | None:
    """Why a parsed completion cannot be the answer to a request for ``max_tokens`` tokens, or None.

    Such an answer is recorded as ``malformed_body``, never compared: ids outside 0..2^31-1 (readers pad
    with -1 and keep ids in fixed-width integers), fewer ids than token strings (the ids lost a position),
    or more tokens than were asked for."""
    ids, tokens = completion.token_ids, completion.tokens
    if ids is not None:
        bad = next((t for t in ids if type(t) is not int or not 0 <= t < TOKEN_ID_LIMIT), None)
        if bad is not None:
            return f"token id {bad!r} is not an integer in 0..{TOKEN_ID_LIMIT - 1}"
        if tokens is not None and len(ids) < len(tokens):
            return f"fewer token ids ({len(ids)}) than tokens ({len(tokens)})"
    generated = max(len(ids or ()), len(tokens or ()))
    if max_tokens is not None and generated > max_tokens:
        return f"{generated} tokens generated, more than the {max_tokens} max_tokens asked for"
    return None


def redact_completion(c: Completion, secret: str) -> None:
    """Take the API key out of a completion's text, finish reason, id, tokens and alternatives, in place.

    A token string is replaced whole where the key, in the joined text of the tokens, overlaps it, so a
    key split over several tokens goes too and positions stay as they were; at such a position the
    alternative equal to the chosen token goes with it."""
    c.text = redact(c.text, secret)
    if c.finish_reason is not None:
        c.finish_reason = redact(c.finish_reason, secret)
    if c.answer_id is not None:
        c.answer_id = redact(c.answer_id, secret)
    hit = _key_positions(c.tokens, secret) if c.tokens is not None else set()
    if c.tokens is not None and hit:
        chosen = c.tokens
        c.tokens = [REDACTED if i in hit else t for i, t in enumerate(chosen)]
        if c.top_logprobs is not None:
            c.top_logprobs = [
                [(REDACTED if i in hit and t == chosen[i] else redact(t, secret), lp) for t, lp in position]
                for i, position in enumerate(c.top_logprobs)
            ]
    elif c.top_logprobs is not None and any(secret in t for position in c.top_logprobs for t, _ in position):
        c.top_logprobs = [[(redact(t, secret), lp) for t, lp in position] for position in c.top_logprobs]


def _key_positions(tokens: list[str], secret: str) -> set[int]:
    """The positions whose token overlaps an occurrence of ``secret`` in the tokens' joined text."""
    joined = "".join(tokens)
    spans = []
    at = joined.find(secret)
    while at >= 0:
        spans.append((at, at + len(secret)))
        at = joined.find(secret, at + 1)
    if not spans:
        return set()
    hit, start = set(), 0
    for i, token in enumerate(tokens):
        end = start + len(token)
        if any(a < end and start < b for a, b in spans):
            hit.add(i)
        start = end
    return hit
