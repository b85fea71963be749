"""Decide which optional protocol features an endpoint supports, from the body it answered a probe with.

Why it exists: the lead's probe sends one non-streamed request asking for everything it would
like (token ids, logprobs, alternatives, ``token_id:N`` strings, SGLang ``sglext`` ids) and keeps
only what came back. Servers ignore fields they do not know, so "accepted" proves nothing; only
what the body holds does. ``include_usage`` cannot be seen in a non-streamed body and is kept as
requested (a server that ignores it just sends no usage chunk).

Pure: bytes in, ``Features`` out.
"""

from __future__ import annotations

from typing import Any

import orjson

from loadgen.core.wire.response import parse_body
from loadgen.core.wire.types import Features, Kind


def features_from_probe(kind: Kind, body: bytes | str, requested: Features) -> Features:
    """The subset of ``requested`` that the probe's response body shows the endpoint honours.

    Raises ``MalformedResponse`` when the body is not a completion at all.
    """
    completion = parse_body(kind, body, tokens_as_ids=requested.tokens_as_ids)
    if kind == "generate":  # ids always come back on /generate; nothing else in Features applies there
        logprobs = requested.logprobs and completion.logprobs is not None
        top = requested.top_logprobs if logprobs and completion.top_logprobs is not None else 0
        return Features(logprobs=logprobs, top_logprobs=top)
    raw: dict[str, Any] = orjson.loads(body)  # parse_body proved it is an object with choices
    choice = next((c for c in raw["choices"] if c.get("index", 0) == 0), raw["choices"][0])
    explicit_ids = choice.get("token_ids", choice.get("response_token_ids"))
    sglext = raw.get("sglext")
    logprobs = requested.logprobs and completion.logprobs is not None
    tokens = completion.tokens
    return Features(
        return_token_ids=requested.return_token_ids and isinstance(explicit_ids, list),
        logprobs=logprobs,
        top_logprobs=requested.top_logprobs if logprobs and completion.top_logprobs is not None else 0,
        tokens_as_ids=requested.tokens_as_ids
        and tokens is not None
        and all(t.startswith("token_id:") for t in tokens)
        and completion.token_ids is not None,
        include_usage=requested.include_usage,
        sglext_output_ids=requested.sglext_output_ids
        and isinstance(sglext, dict)
        and sglext.get("output_ids") is not None,
        batch_sizes=requested.batch_sizes and completion.batch_sizes is not None,
    )
