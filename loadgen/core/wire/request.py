"""Build the JSON body of a ``/v1/completions``, ``/v1/chat/completions`` or SGLang ``/generate`` request.

Why it exists: servers fill every sampling parameter a request leaves out from the model's
generation config (vLLM: "user -> server default -> OpenAI default"), so a canary that omits one
is not the request it claims to be. This module sends temperature, top_p, seed, max_tokens, n and
the two OpenAI penalties explicitly, every time, and asks for the optional parts (logprobs, token
ids, usage) in each server's spelling. A sampled canary (``Sampling``) changes temperature, top_p and n.

Non-OpenAI knobs (vLLM/SGLang ``repetition_penalty``; llama.cpp ``repeat_penalty``) would be refused by
hosted OpenAI APIs, so they travel in ``extra``; ``top_k`` and ``min_p`` (vLLM, SGLang, llama.cpp and the
embedded engine take both) are sent only where a sampled canary sets them. With temperature 0 only the
repetition penalties change a greedy choice.

Pure: returns a dict, never sends it.
"""

from __future__ import annotations

from typing import Any

from loadgen.core.wire.generate import generate_body
from loadgen.core.wire.types import GREEDY, Features, Kind, Sampling

# Sent explicitly in every body; ``extra`` may not override them.
SAMPLING_DEFAULTS: dict[str, Any] = {
    "temperature": 0,
    "top_p": 1,
    "n": 1,
    "frequency_penalty": 0,
    "presence_penalty": 0,
}


def build_body(
    kind: Kind,
    *,
    model: str,
    prompt: str | None,
    messages: list[dict[str, str]] | None,
    max_tokens: int,
    seed: int | None,
    stream: bool,
    features: Features,
    stop: list[str] | None = None,
    extra: dict[str, Any] | None = None,
    sampling: Sampling = GREEDY,
) -> dict[str, Any]:
    """The request body for ``kind``; raises ``ValueError`` on inputs no server could accept."""
    if max_tokens < 1:
        raise ValueError(f"build_body: max_tokens must be >= 1, got {max_tokens}")
    if features.top_logprobs < 0:
        raise ValueError(f"build_body: top_logprobs must be >= 0, got {features.top_logprobs}")
    if kind == "generate":  # SGLang's native route: no model, sampling in its own object
        if prompt is None or messages is not None:
            raise ValueError("build_body: a generate request takes `prompt` and no `messages`")
        return generate_body(
            prompt=prompt,
            max_tokens=max_tokens,
            seed=seed,
            stream=stream,
            features=features,
            stop=stop,
            extra=extra,
            sampling=sampling,
        )
    body: dict[str, Any] = {"model": model}
    if kind == "completions":
        if prompt is None or messages is not None:
            raise ValueError("build_body: a completions request takes `prompt` and no `messages`")
        body["prompt"] = prompt
    elif kind == "chat":
        if messages is None or prompt is not None:
            raise ValueError("build_body: a chat request takes `messages` and no `prompt`")
        body["messages"] = messages
    else:
        raise ValueError(f"build_body: kind {kind!r} is not 'completions', 'chat' or 'generate'")

    body["max_tokens"] = max_tokens
    body["seed"] = seed
    body.update(SAMPLING_DEFAULTS)
    body.update(temperature=sampling.temperature, top_p=sampling.top_p, n=sampling.n)
    if sampling.top_k is not None:
        body["top_k"] = sampling.top_k
    if sampling.min_p is not None:
        body["min_p"] = sampling.min_p
    body["stream"] = stream
    if stream and features.include_usage:
        body["stream_options"] = {"include_usage": True}
    if stop:
        body["stop"] = list(stop)
    if features.logprobs:
        if kind == "completions":
            body["logprobs"] = features.top_logprobs  # legacy integer form
        else:
            body["logprobs"] = True
            body["top_logprobs"] = features.top_logprobs
    if features.return_token_ids:
        body["return_token_ids"] = True
    if features.tokens_as_ids:
        body["return_tokens_as_token_ids"] = True
    if features.sglext_output_ids:
        body["return_output_ids_in_sglext"] = True
    if features.batch_sizes:
        body["x_batch_sizes"] = True
    if extra:
        clash = sorted(set(extra) & set(body))
        if clash:
            raise ValueError(f"build_body: `extra` may not override {clash}; they are set explicitly")
        body.update(extra)
    return body
