"""The types the OpenAI-compatible dialect layer speaks: what to ask for, what came back, what went wrong.

Pure data; no I/O, no Locust. ``Completion`` is one parsed response (streamed or not) in the
shape the canary record stores; ``Features`` says which optional parts of the protocol to ask
for. ``MalformedResponse`` is a ``ValueError`` on purpose: an endpoint that answers garbage is a
fault recorded as data (``error_kind="malformed_body"``), not a ``LoadgenError`` for the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["completions", "chat", "generate"]  # "generate": SGLang's native route (loadgen.core.wire.generate)
KINDS: tuple[Kind, ...] = ("completions", "chat", "generate")


@dataclass(slots=True)
class Completion:
    """One completion as the server returned it. ``None`` means "not returned", never empty-as-zero."""

    # Generated ids: vLLM/SGLang ``token_ids``, SGLang ``sglext.output_ids``, llama.cpp logprobs
    # ``id``, or vLLM ``token_id:N`` token strings when ``return_tokens_as_token_ids`` was used.
    token_ids: list[int] | None
    tokens: list[str] | None  # token strings from logprobs, as sent
    logprobs: list[float] | None  # chosen-token logprobs; None if any position lacked one
    top_logprobs: list[list[tuple[str, float]]] | None  # per position, alternatives most likely first
    text: str
    finish_reason: str | None
    usage: dict[str, Any] | None  # as the server sent it (prompt_tokens_details.cached_tokens where given)
    batch_sizes: list[int] | None = None  # ``x_batch_sizes``: the engine's batch size at each step of this request
    # the prompt as the engine tokenized it (vLLM ``return_token_ids``: ``prompt_token_ids`` on the choice): what a
    # re-score sends back with the output ids (loadgen.core.wire.rescore); None where the answer did not carry it
    prompt_token_ids: list[int] | None = None
    # the answer's own id (OpenAI ``id``; SGLang /generate ``meta_info.id``): the engine's name for the request, which
    # a router in front may have chosen instead of the client's X-Request-Id (docs/design.md, "Joining ids")
    answer_id: str | None = None


@dataclass(frozen=True, slots=True)
class Features:
    """What to ask the endpoint for; the probe keeps only what the endpoint proved it supports."""

    return_token_ids: bool = False  # vLLM / SGLang ``return_token_ids`` (per-choice ``token_ids``)
    logprobs: bool = False  # chosen-token logprobs (completions: ``logprobs: k``; chat: ``logprobs: true``)
    top_logprobs: int = 0  # alternatives per position (0 = none); llama.cpp returns nothing at all for 0
    tokens_as_ids: bool = False  # vLLM ``return_tokens_as_token_ids``: tokens sent as ``token_id:N``
    include_usage: bool = False  # ``stream_options.include_usage`` when streaming
    sglext_output_ids: bool = False  # SGLang ``return_output_ids_in_sglext`` (works on streamed chat)
    batch_sizes: bool = False  # ``x_batch_sizes``: the engine's own batch sizes (the embedded engine's extension)


@dataclass(frozen=True, slots=True)
class Sampling:
    """How a request samples: greedy (the default) or a sample at ``temperature`` > 0. ``top_k`` and ``min_p``
    travel only where set (hosted OpenAI APIs refuse them); ``n``: choices of the one request."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int | None = None
    min_p: float | None = None
    n: int = 1


GREEDY = Sampling()


class MalformedResponse(ValueError):
    """A body or stream payload that is not what an OpenAI-compatible server sends; says what is wrong."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StreamError(MalformedResponse):
    """The server reported an error inside a 200 response (``{"error": ...}``); carries its message.

    A subclass of ``MalformedResponse`` so a caller that only cares about "no usable completion"
    catches both; a caller that wants to record the server's own words reads ``server_message``.
    """

    def __init__(self, server_message: str) -> None:
        super().__init__(f"server reported an error: {server_message}")
        self.server_message = server_message
