"""SGLang's native ``/generate`` dialect: the request body, and its answers folded into one ``Completion``.

Why it exists: SGLang's OpenAI routes send token strings only (no ids), and strings can merge
distinct token ids; ``/generate`` returns ``output_ids`` on every answer and, with
``return_logprob``, ``meta_info.output_token_logprobs`` as ``[logprob, id, text]`` per token, so
canaries are compared by ids (docs/design.md, "Endpoint kinds"). Shapes as SGLang 0.5.15 sends
them (``tokenizer_manager.py``, ``http_server.py``; fixtures captured from the real server are in
``tests/loadgen/core/wire/fixtures``):

- a body: ``{"text", "output_ids", "meta_info": {"id", "finish_reason", "prompt_tokens",
  "completion_tokens", "cached_tokens", "output_token_logprobs", "output_top_logprobs", ...}}``;
  ``finish_reason`` is an object (``{"type": "length", "length": 8}``, ``{"type": "stop",
  "matched": 0}``, ``{"type": "abort", "message": ...}``), ``null`` until the request ends;
- a stream: ``data: <the same object>`` per step, then ``data: [DONE]``. By default every chunk
  is cumulative (all ids and logprobs so far; ``text`` may be ``null`` on intermediate chunks);
  with ``--incremental-streaming-output`` each chunk carries only the new ids and logprob
  entries. A chunk is cumulative when its ids number ``meta_info.completion_tokens``, which
  counts every token so far in both modes.

Usage is rebuilt in the OpenAI shape (``prompt_tokens``, ``completion_tokens``,
``prompt_tokens_details.cached_tokens``) so cache checks read one place whatever the dialect.
Pure: no I/O, no logging; it must not know about Locust or the record.
"""

from __future__ import annotations

from typing import Any

from loadgen.core.wire.types import GREEDY, Completion, Features, MalformedResponse, Sampling, StreamError

# SGLang's sampling_params names for what build_body sends explicitly; top_k -1 is "whole vocabulary"
# as in SGLang's OpenAI path, repetition_penalty 1 is "none" (the OpenAI routes' defaults).
_SAMPLING = {"temperature": 0, "top_p": 1, "top_k": -1, "n": 1, "frequency_penalty": 0, "presence_penalty": 0}


def generate_body(
    *,
    prompt: str,
    max_tokens: int,
    seed: int | None,
    stream: bool,
    features: Features,
    stop: list[str] | None,
    extra: dict[str, Any] | None,
    sampling: Sampling = GREEDY,
) -> dict[str, Any]:
    """A ``/generate`` body: every sampling parameter explicit, as the OpenAI bodies state them; the seed is
    ``sampling_params.sampling_seed`` (SGLang's ``SamplingParams``; its OpenAI routes copy ``seed`` there).

    ``extra`` keys go into ``sampling_params`` except ``cache_salt``, which SGLang spells ``extra_key``
    on this route (its OpenAI routes copy ``cache_salt`` there too)."""
    params: dict[str, Any] = {"max_new_tokens": max_tokens, **_SAMPLING}
    params.update(temperature=sampling.temperature, top_p=sampling.top_p, n=sampling.n)
    if sampling.top_k is not None:
        params["top_k"] = sampling.top_k
    if sampling.min_p is not None:
        params["min_p"] = sampling.min_p
    if seed is not None:
        params["sampling_seed"] = seed
    if stop:
        params["stop"] = list(stop)
    body: dict[str, Any] = {"text": prompt, "sampling_params": params, "stream": stream}
    if features.logprobs:
        body["return_logprob"] = True
        body["logprob_start_len"] = -1  # output tokens only, as the OpenAI route asks
        body["top_logprobs_num"] = features.top_logprobs
        body["return_text_in_logprobs"] = True
    for key, value in (extra or {}).items():
        if key == "cache_salt":
            body["extra_key"] = value
        elif key in params:
            raise ValueError(f"build_body: `extra` may not override {key!r}; it is set explicitly")
        else:
            params[key] = value
    return body


def _ids(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or not all(type(t) is int for t in value):
        raise MalformedResponse(f"{where}: `output_ids` is not a list of integers")
    return value


def _entry(entry: Any, where: str) -> tuple[float | None, int, str | None]:
    """One ``[logprob, id, text]``. A null logprob is kept as None: SGLang's JSON writer (orjson) sends
    -inf and NaN as null, so the position has no comparable value."""
    if not isinstance(entry, list) or len(entry) < 2 or type(entry[1]) is not int:
        raise MalformedResponse(f"{where}: a logprob entry is not [logprob, token id, text]")
    value = entry[0]
    if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
        raise MalformedResponse(f"{where}: a logprob entry's logprob is not a number")
    text = entry[2] if len(entry) > 2 else None
    if text is not None and not isinstance(text, str):
        raise MalformedResponse(f"{where}: a logprob entry's text is not a string")
    return None if value is None else float(value), entry[1], text


def _finish_reason(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict):
        kind = value.get("type")
        if kind == "abort":
            raise StreamError(str(value.get("message") or "request aborted by the server"))
        return str(kind) if kind is not None else None
    if isinstance(value, str):
        return value
    raise MalformedResponse(f"{where}: `meta_info.finish_reason` is neither an object nor a string")


class GenerateBuilder:
    """Folds ``/generate`` answers (one body, or each chunk of a stream) into one ``Completion``."""

    __slots__ = ("answer_id", "finish_reason", "ids", "lp", "text", "top", "usage")

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.lp: list[tuple[float | None, int, str | None]] | None = None
        self.top: list[list[tuple[float | None, int, str | None]]] | None = None
        self.text = ""
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.answer_id: str | None = None  # ``meta_info.id``: the engine's rid

    def ingest(self, obj: Any, *, where: str) -> bool:
        """Fold in one decoded answer; True when it carried at least one new generated token."""
        if not isinstance(obj, dict):
            raise MalformedResponse(f"{where} is a JSON {type(obj).__name__}, not an object")
        error = obj.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else error
            raise StreamError(str(message))
        meta = obj.get("meta_info")
        if not isinstance(meta, dict) or "output_ids" not in obj:
            raise MalformedResponse(f"{where} lacks `output_ids` and `meta_info`: not a /generate answer")
        ids = _ids(obj["output_ids"], where)
        total = meta.get("completion_tokens")
        cumulative = type(total) is int and len(ids) == total
        before = len(self.ids)
        self.ids = list(ids) if cumulative else [*self.ids, *ids]
        text = obj.get("text")
        if text is not None:
            if not isinstance(text, str):
                raise MalformedResponse(f"{where}: `text` is a {type(text).__name__}, not a string")
            self.text = text if cumulative else self.text + text
        lps = meta.get("output_token_logprobs")
        if lps is not None:
            if not isinstance(lps, list):
                raise MalformedResponse(f"{where}: `meta_info.output_token_logprobs` is not a list")
            entries = [_entry(e, where) for e in lps]
            self.lp = entries if cumulative or self.lp is None else [*self.lp, *entries]
        tops = meta.get("output_top_logprobs")
        if tops is not None:
            if not isinstance(tops, list):
                raise MalformedResponse(f"{where}: `meta_info.output_top_logprobs` is not a list")
            positions = [[_entry(e, where) for e in (p or [])] for p in tops]
            self.top = positions if cumulative or self.top is None else [*self.top, *positions]
        self.finish_reason = _finish_reason(meta.get("finish_reason"), where) or self.finish_reason
        self.usage = _usage(meta) or self.usage
        rid = meta.get("id")
        if self.answer_id is None and isinstance(rid, str) and rid:
            self.answer_id = rid
        return len(self.ids) > before

    def finish(self) -> Completion:
        lp = self.lp
        usable = lp is not None and len(lp) == len(self.ids) and all(e[2] is not None for e in lp)
        tokens = [str(e[2]) for e in lp] if usable and lp is not None else None
        values = [e[0] for e in lp] if tokens is not None and lp is not None else None
        logprobs = [v for v in values if v is not None] if values is not None else None
        if logprobs is not None and values is not None and len(logprobs) != len(values):
            logprobs = None  # a position without a logprob: the sequence is not comparable
        top = None
        if tokens is not None and self.top is not None and len(self.top) == len(tokens) and any(self.top):
            top = [_alternatives(position) for position in self.top]
        return Completion(
            token_ids=self.ids,
            tokens=tokens,
            logprobs=logprobs,
            top_logprobs=top,
            text=self.text,
            finish_reason=self.finish_reason,
            usage=self.usage,
            answer_id=self.answer_id,
        )


def _alternatives(position: list[tuple[float | None, int, str | None]]) -> list[tuple[str, float]]:
    """One position's alternatives as (token text, logprob), most likely first, ties in server order."""
    alts = [(t, v) for v, _, t in position if t is not None and v is not None]
    alts.sort(key=lambda a: -a[1])
    return alts


def _usage(meta: dict[str, Any]) -> dict[str, Any] | None:
    """``meta_info``'s counts in the OpenAI usage shape; None when it carries none."""
    prompt, completion, cached = meta.get("prompt_tokens"), meta.get("completion_tokens"), meta.get("cached_tokens")
    if prompt is None and completion is None:
        return None
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
    if type(prompt) is int and type(completion) is int:
        usage["total_tokens"] = prompt + completion
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def usage_of(obj: Any) -> dict[str, Any] | None:
    """A non-streamed ``/generate`` body checked as an answer (not an error); its usage only (background)."""
    builder = GenerateBuilder()
    builder.ingest(obj, where="response body")
    return builder.usage
