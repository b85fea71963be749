"""Validation of OpenAI-style request bodies into engine parameters, with OpenAI-shaped errors.

Why this module exists: a client mistake (bad JSON, unknown model, value out of range, prompt
too long) must come back as a 4xx with a message naming the field, never a 500; and both
dialects (``/v1/completions`` and ``/v1/chat/completions``) must map onto the same
:class:`SamplingParams`. Parameters the engine cannot honour (echo, penalties, logit bias, and
``prompt_logprobs`` on chat) are rejected by name rather than silently ignored; other unknown fields are
ignored, as vLLM does. ``n`` asks for n choices of each prompt, each its own engine request, a seeded
one's choice ``j`` seeded ``seed + j`` as vLLM's ``ParentRequest`` does (``choices``). ``prompt_logprobs``
(completions; vLLM's extension) is checked with vLLM's messages: not with a stream, at least 0 (or -1, the
whole vocabulary), at most 20. The engine's own extension ``x_batch_sizes`` (a boolean: report the batch size
of every step; see loadgen/engine/server.py) is validated like any flag. Pure: dicts in, dataclasses out.

A completions ``prompt`` may be a list of prompts (strings or token-id lists), as vLLM's OpenAI server
takes it: one request whose prompts enter the engine together (a client's way to make N requests arrive
at the same instant). Each is checked as a lone prompt would be, its errors naming it (``prompt[2]``);
a one-element list is the plain prompt, as before, and its errors say ``prompt``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Final

from loadgen.engine.sampling import SamplingParams
from loadgen.engine.tokenizer import Tokenizer

MODEL_ID: Final = "loadgen-tiny"
MAX_LOGPROBS: Final = 20
MAX_PROMPTS: Final = 1024  # prompts in one completions request: a bound on what one body may submit at once
_NEUTRAL: Final = {"presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0}


class ApiError(Exception):
    """An error the server renders as ``{"error": {message, type, param, code}}``."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    @property
    def type(self) -> str:
        named = {404: "NotFoundError", 413: "RequestEntityTooLarge", 500: "InternalServerError"}
        named |= {502: "BadGatewayError", 504: "GatewayTimeoutError"}  # a decode server's failed KV fetch
        named[503] = "ServiceUnavailableError"  # the engine thread died
        return named.get(self.status, "BadRequestError")

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.status}}


@dataclass(frozen=True)
class ParsedRequest:
    """A validated request: prompt tokens, sampling, and how to render the answer.

    ``prompts``: every prompt in order, one for chat and for a single completions prompt; each is run as its
    own engine request with the same sampling. ``one(i)`` is the request of prompt ``i`` alone."""

    chat: bool
    prompts: tuple[list[int], ...]
    params: SamplingParams
    stream: bool
    include_usage: bool
    continuous_usage: bool
    return_token_ids: bool
    tokens_as_ids: bool
    cache_salt: str | None
    request_id: str | None
    x_batch_sizes: bool = False
    n: int = 1  # choices per prompt

    @property
    def choice_count(self) -> int:
        return len(self.prompts) * self.n

    @property
    def prompt_ids(self) -> list[int]:
        """The prompt of a request of one prompt (``one(i)`` gives each prompt of a list its own request)."""
        if len(self.prompts) != 1:
            raise ValueError(f"a request of {len(self.prompts)} prompts has no single prompt_ids; use one(i)")
        return self.prompts[0]

    def one(self, index: int) -> ParsedRequest:
        """Prompt ``index`` as a request of its own: what a client sending it alone would have asked."""
        return replace(self, prompts=(self.prompts[index],))

    def choices(self) -> list[ParsedRequest]:
        """One request per choice, in choice order (prompt by prompt, its ``n`` children in turn): child ``j`` of a
        seeded request is seeded ``seed + j``, as vLLM seeds the children of ``n``, so each is reproducible alone."""
        seed = self.params.seed
        return [
            replace(self.one(i), n=1, params=replace(self.params, seed=None if seed is None else seed + j))
            for i in range(len(self.prompts))
            for j in range(self.n)
        ]


def _bad(field: str, expected: str, value: object) -> ApiError:
    return ApiError(400, f"'{field}' must be {expected}; got {value!r}", field)


def _int(body: dict[str, Any], field: str, default: int | None, lo: int, hi: int | None) -> int | None:
    value = body.get(field)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(field, "an integer", value)
    if value < lo or (hi is not None and value > hi):
        raise _bad(field, f"between {lo} and {hi}" if hi is not None else f">= {lo}", value)
    return value


def _float(body: dict[str, Any], field: str, default: float, lo: float, hi: float) -> float:
    value = body.get(field)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(field, "a number", value)
    if not lo <= float(value) <= hi:
        raise _bad(field, f"between {lo} and {hi}", value)
    return float(value)


def _bool(body: dict[str, Any], field: str) -> bool:
    value = body.get(field, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _bad(field, "a boolean", value)
    return value


def _stops(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,) if stop else ()
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= 16:
        return tuple(s for s in stop if s)
    raise _bad("stop", "a string or a list of at most 16 strings", stop)


def _stop_ids(body: dict[str, Any], vocab: int) -> tuple[int, ...]:
    ids = body.get("stop_token_ids") or []
    if not isinstance(ids, list) or not all(isinstance(i, int) and 0 <= i < vocab for i in ids):
        raise _bad("stop_token_ids", f"a list of token ids in [0, {vocab})", ids)
    return tuple(ids)


def _reject_unsupported(body: dict[str, Any]) -> None:
    if body.get("echo"):
        raise ApiError(400, "'echo' is not supported by the embedded engine", "echo")
    if body.get("logit_bias"):
        raise ApiError(400, "'logit_bias' is not supported by the embedded engine", "logit_bias")
    for field, neutral in _NEUTRAL.items():
        value = body.get(field)
        if value is not None and value != neutral:
            raise ApiError(400, f"'{field}' must be {neutral} (unsupported); got {value!r}", field)


def check_model(body: dict[str, Any]) -> None:
    model = body.get("model")
    if model is not None and model != MODEL_ID:
        raise ApiError(404, f"The model `{model}` does not exist.", "model")


def _token_prompt(prompt: object, field: str, tok: Tokenizer) -> list[int]:
    """One prompt: a non-empty string, or a non-empty list of token ids."""
    if isinstance(prompt, str) and prompt:
        return tok.encode(prompt)
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < tok.vocab_size for t in prompt)
    ):
        return list(prompt)
    raise _bad(field, f"a non-empty string or a list of token ids in [0, {tok.vocab_size})", prompt)


def _prompt_list(prompt: object, tok: Tokenizer) -> list[list[int]]:
    """The completions ``prompt``: one prompt (a string, token ids, or a list of one of either), or a list of
    strings or token-id lists, each checked alone and named ``prompt[i]`` in its error."""
    if not (isinstance(prompt, list) and prompt and all(isinstance(p, str | list) for p in prompt)):
        if prompt == []:
            raise _bad("prompt", "a non-empty string, list of token ids, or list of prompts", prompt)
        return [_token_prompt(prompt, "prompt", tok)]  # a string, or token ids (a list of ints)
    if len(prompt) == 1:
        return [_token_prompt(prompt[0], "prompt", tok)]
    if len(prompt) > MAX_PROMPTS:
        raise ApiError(400, f"'prompt' may hold at most {MAX_PROMPTS} prompts; got {len(prompt)}", "prompt")
    return [_token_prompt(p, f"prompt[{i}]", tok) for i, p in enumerate(prompt)]


def _content_text(content: object, index: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise _bad(f"messages[{index}].content", "a string or a list of text parts", part)
            parts.append(part["text"])
        return "".join(parts)
    if content is None:
        return ""
    raise _bad(f"messages[{index}].content", "a string or a list of text parts", content)


def chat_prompt_ids(messages: object, tok: Tokenizer) -> list[int]:
    """The chat template: ``<|role|>content<|end|>`` per message, then ``<|assistant|>``."""
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "a non-empty list of messages", messages)
    ids: list[int] = []
    for i, msg in enumerate(messages):
        role = msg.get("role") if isinstance(msg, dict) else None
        if role not in ("system", "user", "assistant", "developer", "tool"):
            raise _bad(f"messages[{i}].role", "system, user, assistant, developer or tool", role)
        role_token = "<|system|>" if role in ("system", "developer") else f"<|{role}|>"
        if role == "tool":
            role_token = "<|user|>"
        ids.append(tok.specials[role_token])
        ids.extend(tok.encode(_content_text(msg.get("content"), i)))
        ids.append(tok.specials["<|end|>"])
    ids.append(tok.specials["<|assistant|>"])
    return ids


def _room(prompt_ids: list[int], max_tokens: int | None, max_model_len: int, param: str, where: str) -> int:
    """The tokens the context leaves after this prompt; a 400 when there is none, or fewer than asked."""
    room = max_model_len - len(prompt_ids)
    if room < 1 or (max_tokens is not None and max_tokens > room):
        asked = len(prompt_ids) + (max_tokens or 0)
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{asked} tokens ({len(prompt_ids)} in {where}, {max_tokens or 0} in the completion).",
            param,
        )
    return room


def parse_request(body: object, chat: bool, tok: Tokenizer, max_model_len: int) -> ParsedRequest:
    """Validate one request body for the given dialect; raises :class:`ApiError` on any mistake."""
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    check_model(body)
    _reject_unsupported(body)
    if chat:
        prompts = [chat_prompt_ids(body.get("messages"), tok)]
        wants_lp = _bool(body, "logprobs")
        top = _int(body, "top_logprobs", 0, 0, MAX_LOGPROBS)
        if top and not wants_lp:
            raise ApiError(400, "'top_logprobs' requires 'logprobs' to be true", "top_logprobs")
        logprobs = top if wants_lp else None
        max_field = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        max_tokens = _int(body, max_field, None, 1, None)
    else:
        prompts = _prompt_list(body.get("prompt"), tok)
        logprobs = _int(body, "logprobs", None, 0, MAX_LOGPROBS)
        max_field = "max_tokens"
        max_tokens = _int(body, "max_tokens", 16, 1, None)
    if len(prompts) == 1:
        rooms = [_room(prompts[0], max_tokens, max_model_len, max_field, "the messages")]
    else:  # the prompt that does not fit is the one to name
        rooms = [_room(ids, max_tokens, max_model_len, f"prompt[{i}]", f"prompt[{i}]") for i, ids in enumerate(prompts)]
    seed = _int(body, "seed", None, -(2**63), 2**63 - 1)
    n = _int(body, "n", 1, 1, MAX_PROMPTS // len(prompts)) or 1
    stream = _bool(body, "stream")
    params = SamplingParams(
        max_tokens=max_tokens if max_tokens is not None else rooms[0],  # unset only in chat: one prompt
        temperature=_float(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_float(body, "top_p", 1.0, 1e-9, 1.0),
        top_k=_int(body, "top_k", 0, -1, tok.vocab_size) or 0,
        min_p=_float(body, "min_p", 0.0, 0.0, 1.0),
        seed=None if seed is None else seed % 2**63,
        stop=_stops(body),
        stop_token_ids=_stop_ids(body, tok.vocab_size),
        ignore_eos=_bool(body, "ignore_eos"),
        logprobs=logprobs,
        prompt_logprobs=_prompt_logprobs(body, chat, stream, tok.vocab_size),
    )
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, dict) or not stream):
        raise _bad("stream_options", "an object, and only with stream=true", options)
    options = options or {}
    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise _bad("cache_salt", "a non-empty string", salt)
    request_id = body.get("request_id")
    return ParsedRequest(
        chat=chat,
        prompts=tuple(prompts),
        params=params,
        stream=stream,
        include_usage=bool(options.get("include_usage")),
        continuous_usage=bool(options.get("continuous_usage_stats")),
        return_token_ids=_bool(body, "return_token_ids"),
        tokens_as_ids=_bool(body, "return_tokens_as_token_ids"),
        cache_salt=salt,
        request_id=request_id if isinstance(request_id, str) and request_id else None,
        x_batch_sizes=_bool(body, "x_batch_sizes"),
        n=n,
    )


def _prompt_logprobs(body: dict[str, Any], chat: bool, stream: bool, vocab: int) -> int | None:
    """vLLM's ``prompt_logprobs`` checks and messages (its protocol's ``check_logprobs``, its processor's bound);
    -1 is the whole vocabulary, over the bound of 20. Chat is refused: the re-score is a completions feature here."""
    value = body.get("prompt_logprobs")
    if value is None:
        return None
    if chat:
        raise ApiError(
            400,
            "'prompt_logprobs' is served on /v1/completions only (send the token ids as the prompt)",
            "prompt_logprobs",
        )
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad("prompt_logprobs", "an integer", value)
    if stream and (value > 0 or value == -1):
        raise ApiError(400, "`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs")
    if value < -1:
        raise ApiError(400, "`prompt_logprobs` must be a positive value or -1.", "prompt_logprobs")
    k = vocab if value == -1 else value
    if k > MAX_LOGPROBS:
        raise ApiError(
            400,
            f"Requested prompt logprobs of {k}, which is greater than max allowed: {MAX_LOGPROBS}",
            "prompt_logprobs",
        )
    return k


def check_prompt_logprobs(parsed: ParsedRequest, transfer: bool, served: bool) -> None:
    """``prompt_logprobs`` needs every prompt position computed here, on a backend that computes them."""
    if parsed.params.prompt_logprobs is None:
        return
    if transfer:
        raise ApiError(400, "'prompt_logprobs' cannot be served with 'kv_transfer_params'", "prompt_logprobs")
    if not served:
        raise ApiError(400, "'prompt_logprobs' is not served by this backend (--backend gpu)", "prompt_logprobs")


REQUEST_ID_HEADER = "X-Request-Id"
MAX_REQUEST_ID_CHARS = 128


def header_request_id(value: str | None) -> str | None:
    """The ``X-Request-Id`` header as the request's base id (vLLM takes it so), or None where it is absent,
    empty, longer than 128 characters or not printable ASCII: then the id is made as without it."""
    if not value or len(value) > MAX_REQUEST_ID_CHARS:
        return None
    return value if all(" " <= c <= "~" for c in value) else None


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")  # what vLLM's boolean query takes (FastAPI)


def query_flag(value: str | None, name: str) -> bool:
    """A boolean query parameter (absent: false); anything else is a 400 naming it."""
    asked = (value or "false").lower()
    if asked not in _TRUE + _FALSE:
        raise ApiError(400, f"'{name}' must be a boolean; got {asked!r}", name)
    return asked in _TRUE
