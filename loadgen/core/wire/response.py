"""Parse OpenAI-compatible responses, whole or streamed, into one ``Completion``, for every server dialect.

Why it exists: servers put the same facts in different places. Token ids come from vLLM/SGLang
``choices[].token_ids`` (per-chunk deltas when streamed), SGLang's response-level
``sglext.output_ids``, llama.cpp's ``id`` in each chat-shaped ``logprobs.content[]`` entry (on
both endpoints), or vLLM ``token_id:N`` strings. Logprobs come as legacy ``tokens`` /
``token_logprobs`` / ``top_logprobs`` (dicts token -> logprob) or chat-shaped ``content[]``;
llama.cpp's ``post_sampling_probs`` sends ``prob`` / ``top_probs`` instead (converted to logs).
Usage may ride on a final chunk with empty ``choices``. One builder folds any of these in, so a
body and the same answer streamed in any chunking give the same ``Completion``.

Rules: only choice index 0 is read (canaries send ``n=1``). Text is ``text`` (completions) or
``content`` (chat); reasoning text is not part of it, though a reasoning delta still counts as a
generated token for time-to-first-token. ``{"error": ...}`` or ``{"object": "error"}`` raises
``StreamError``. Alternatives are sorted by logprob, most likely first, ties in server order.

SGLang's native ``/generate`` (kind ``"generate"``) is a dialect of its own: ``loadgen.core.wire.generate``
folds it, and ``parse_body``, ``parse_usage`` and ``StreamAccumulator`` hand it over by kind.

Pure and on the hot path: no I/O, no logging, no Locust; JSON through orjson.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from loadgen.core.wire.generate import GenerateBuilder, usage_of
from loadgen.core.wire.types import Completion, Kind, MalformedResponse, StreamError

_TOKEN_ID_PREFIX = "token_id:"
# Above any engine's batch (vLLM's --max-num-seqs defaults to 256 or 1024): a larger ``x_batch_sizes`` entry is no
# batch size, and the report would take it as the exact co-residency (the embedded engine refuses a handed-over
# KV claiming one: loadgen/engine/kvwire.py).
MAX_BATCH_SIZE = 1 << 20
# What a zero probability becomes as a logprob (vLLM clamps -inf to this value too).
_ZERO_PROB_LOGPROB = -9999.0


def _neg_logprob(item: tuple[str, float]) -> float:
    return -item[1]


class _Builder:
    """Accumulates one completion from any number of response objects (one per chunk, or one body)."""

    __slots__ = (
        "answer_id",
        "batch_sizes",
        "finish_reason",
        "has_logprobs",
        "ids",
        "kind",
        "lp_ids",
        "lp_top",
        "lp_values",
        "prompt_ids",
        "sglext_ids",
        "text_parts",
        "tokens",
        "tokens_as_ids",
        "usage",
    )

    def __init__(self, kind: Kind, tokens_as_ids: bool) -> None:
        self.kind = kind
        self.tokens_as_ids = tokens_as_ids
        self.text_parts: list[str] = []
        self.ids: list[int] | None = None  # explicit per-choice token_ids
        self.sglext_ids: list[int] | None = None
        self.tokens: list[str] = []
        self.lp_values: list[float | None] = []
        self.lp_ids: list[int | None] = []
        self.lp_top: list[list[tuple[str, float]]] = []
        self.has_logprobs = False
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.batch_sizes: list[int] | None = None
        self.prompt_ids: list[int] | None = None  # ``prompt_token_ids``, where the answer carried them
        self.answer_id: str | None = None  # the first ``id`` the answer carried

    def ingest(self, obj: Any, *, where: str) -> bool:
        """Fold in one decoded response object; True when it carried at least one generated token."""
        if not isinstance(obj, dict):
            raise MalformedResponse(f"{where} is a JSON {type(obj).__name__}, not an object")
        error = obj.get("error")
        if error:
            raise StreamError(_error_message(error))
        if obj.get("object") == "error":
            raise StreamError(_error_message(obj))
        answer_id = obj.get("id")
        if self.answer_id is None and isinstance(answer_id, str) and answer_id:
            self.answer_id = answer_id
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        sglext = obj.get("sglext")
        if isinstance(sglext, dict) and sglext.get("output_ids") is not None:
            self.sglext_ids = _sglext_ids(sglext["output_ids"], where)
        sizes = obj.get("x_batch_sizes")
        if sizes is not None:
            if not isinstance(sizes, list) or not all(type(n) is int and 1 <= n <= MAX_BATCH_SIZE for n in sizes):
                raise MalformedResponse(f"{where}: `x_batch_sizes` is not a list of whole numbers from 1 to 2^20")
            self.batch_sizes = [*(self.batch_sizes or ()), *sizes]
        choices = obj.get("choices")
        if choices is None:
            if usage is None and sglext is None and sizes is None:
                raise MalformedResponse(f"{where} lacks `choices`")
            return False
        if not isinstance(choices, list):
            raise MalformedResponse(f"{where}: `choices` is a {type(choices).__name__}, not a list")
        carried = False
        for choice in choices:
            if not isinstance(choice, dict):
                raise MalformedResponse(f"{where}: a choice is a {type(choice).__name__}, not an object")
            if choice.get("index", 0) == 0 and self._choice(choice, where):
                carried = True
        return carried

    def _choice(self, choice: dict[str, Any], where: str) -> bool:
        carried = False
        if self.kind == "completions":
            text = choice.get("text")
        else:
            message = choice.get("delta")
            if message is None:
                message = choice.get("message")
            text = None
            if isinstance(message, dict):
                text = message.get("content")
                if message.get("reasoning_content") or message.get("reasoning") or message.get("tool_calls"):
                    carried = True
        if text:
            if not isinstance(text, str):
                raise MalformedResponse(f"{where}: choice text is a {type(text).__name__}, not a string")
            self.text_parts.append(text)
            carried = True
        prompt_ids = choice.get("prompt_token_ids")
        if isinstance(prompt_ids, list) and prompt_ids and all(type(t) is int for t in prompt_ids):
            self.prompt_ids = prompt_ids  # kept only whole: the re-score sends them back (loadgen.core.wire.rescore)
        token_ids = choice.get("token_ids")
        if token_ids is None:
            token_ids = choice.get("response_token_ids")  # SGLang non-streamed chat spelling
        if token_ids is not None:
            if not isinstance(token_ids, list) or not all(type(t) is int for t in token_ids):
                raise MalformedResponse(f"{where}: `token_ids` is not a list of integers")
            if self.ids is None:
                self.ids = []
            self.ids.extend(token_ids)
            carried = carried or bool(token_ids)
        logprobs = choice.get("logprobs")
        if logprobs is not None and self._logprobs(logprobs, where):
            carried = True
        finish_reason = choice.get("finish_reason")
        if finish_reason is not None:
            self.finish_reason = str(finish_reason)
        return carried

    def _logprobs(self, logprobs: Any, where: str) -> bool:
        if isinstance(logprobs, dict):
            if "content" in logprobs:
                content = logprobs["content"]
                if content is None:
                    return False
                if not isinstance(content, list):
                    raise MalformedResponse(f"{where}: `logprobs.content` is not a list")
                for entry in content:
                    self._content_entry(entry, where)
                self.has_logprobs = self.has_logprobs or bool(content)
                return bool(content)
            if "tokens" in logprobs:
                return self._legacy(logprobs, where)
            return False
        if isinstance(logprobs, list):  # TGI's /v1/completions type (sent as null): no tokens, so unusable
            return False
        raise MalformedResponse(f"{where}: `logprobs` is a {type(logprobs).__name__}, not an object")

    def _content_entry(self, entry: Any, where: str) -> None:
        if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
            raise MalformedResponse(f"{where}: a `logprobs.content` entry lacks a string `token`")
        self.tokens.append(entry["token"])
        self.lp_values.append(_logprob_of(entry, where))
        token_id = entry.get("id")
        self.lp_ids.append(token_id if type(token_id) is int else None)
        alternatives = entry.get("top_logprobs")
        if alternatives is None:
            alternatives = entry.get("top_probs")
        top: list[tuple[str, float]] = []
        if alternatives:
            if not isinstance(alternatives, list):
                raise MalformedResponse(f"{where}: `top_logprobs` of a content entry is not a list")
            for alt in alternatives:
                if not isinstance(alt, dict) or not isinstance(alt.get("token"), str):
                    raise MalformedResponse(f"{where}: a `top_logprobs` entry lacks a string `token`")
                value = _logprob_of(alt, where)
                if value is None:
                    raise MalformedResponse(f"{where}: a `top_logprobs` entry lacks a logprob")
                top.append((alt["token"], value))
            top.sort(key=_neg_logprob)
        self.lp_top.append(top)

    def _legacy(self, logprobs: dict[str, Any], where: str) -> bool:
        tokens = logprobs.get("tokens") or []
        values = logprobs.get("token_logprobs") or []
        tops = logprobs.get("top_logprobs") or []
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise MalformedResponse(f"{where}: `logprobs.tokens` is not a list of strings")
        if not isinstance(values, list) or len(values) != len(tokens):
            raise MalformedResponse(f"{where}: `logprobs.token_logprobs` does not match `logprobs.tokens`")
        if not isinstance(tops, list) or (tops and len(tops) != len(tokens)):
            raise MalformedResponse(f"{where}: `logprobs.top_logprobs` does not match `logprobs.tokens`")
        for value in values:
            if value is not None and not isinstance(value, (int, float)):
                raise MalformedResponse(f"{where}: `logprobs.token_logprobs` holds a non-number")
        self.tokens.extend(tokens)
        self.lp_values.extend(None if v is None else float(v) for v in values)
        self.lp_ids.extend([None] * len(tokens))
        if not tops:
            self.lp_top.extend([] for _ in tokens)
        for position in tops:
            if position is None:
                self.lp_top.append([])
                continue
            if not isinstance(position, dict):
                raise MalformedResponse(f"{where}: a `logprobs.top_logprobs` position is not an object")
            try:
                top = [(str(t), float(lp)) for t, lp in position.items()]
            except (TypeError, ValueError) as exc:
                raise MalformedResponse(f"{where}: a `logprobs.top_logprobs` value is not a number") from exc
            top.sort(key=_neg_logprob)
            self.lp_top.append(top)
        self.has_logprobs = self.has_logprobs or bool(tokens)
        return bool(tokens)

    def finish(self) -> Completion:
        tokens = self.tokens if self.has_logprobs else None
        values = self.lp_values
        logprobs = [v for v in values if v is not None] if tokens is not None else None
        if logprobs is not None and len(logprobs) != len(values):
            logprobs = None  # a position without a logprob: the sequence is not comparable
        top = self.lp_top if tokens is not None and any(self.lp_top) else None
        return Completion(
            token_ids=self._token_ids(tokens),
            tokens=tokens,
            logprobs=logprobs,
            top_logprobs=top,
            text="".join(self.text_parts),
            finish_reason=self.finish_reason,
            usage=self.usage,
            batch_sizes=self.batch_sizes,
            prompt_token_ids=self.prompt_ids,
            answer_id=self.answer_id,
        )

    def _token_ids(self, tokens: list[str] | None) -> list[int] | None:
        if self.ids is not None:
            return self.ids
        if self.sglext_ids is not None:
            return self.sglext_ids
        if tokens is None:
            return None
        lp_ids = self.lp_ids
        if lp_ids and all(i is not None for i in lp_ids):
            return [i for i in lp_ids if i is not None]
        if self.tokens_as_ids:
            return _ids_from_strings(tokens)
        return None


def _logprob_of(entry: dict[str, Any], where: str) -> float | None:
    value = entry.get("logprob")
    if value is None and "prob" in entry:  # llama.cpp post_sampling_probs
        prob = entry["prob"]
        if not isinstance(prob, (int, float)):
            raise MalformedResponse(f"{where}: a `prob` is not a number")
        return math.log(prob) if prob > 0 else _ZERO_PROB_LOGPROB
    if value is not None and not isinstance(value, (int, float)):
        raise MalformedResponse(f"{where}: a `logprob` is not a number")
    return None if value is None else float(value)


def _ids_from_strings(tokens: list[str]) -> list[int] | None:
    ids: list[int] = []
    for token in tokens:
        if not token.startswith(_TOKEN_ID_PREFIX):
            return None
        digits = token[len(_TOKEN_ID_PREFIX) :]
        if not digits.isdigit():
            return None
        ids.append(int(digits))
    return ids


def _sglext_ids(output_ids: Any, where: str) -> list[int]:
    first = output_ids[0] if isinstance(output_ids, list) and output_ids else output_ids
    ids = first if isinstance(first, list) else output_ids
    if not isinstance(ids, list) or not all(type(t) is int for t in ids):
        raise MalformedResponse(f"{where}: `sglext.output_ids` is not a list of integer lists")
    return ids


def _error_message(error: Any) -> str:
    if isinstance(error, dict):
        message = error.get("message")
        return str(message) if message is not None else orjson.dumps(error).decode()
    return str(error)


def _loads(data: str | bytes, where: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise MalformedResponse(f"{where} is not JSON ({exc}): {data[:80]!r}") from exc


def parse_body(kind: Kind, body: bytes | str, *, tokens_as_ids: bool = False) -> Completion:
    """Parse a non-streamed response body; raises ``MalformedResponse`` (or ``StreamError``)."""
    obj = _loads(body, "response body")
    if kind == "generate":
        generate = GenerateBuilder()
        generate.ingest(obj, where="response body")
        return generate.finish()
    if isinstance(obj, dict) and not obj.get("error") and obj.get("object") != "error":
        choices = obj.get("choices")
        if not isinstance(choices, list) or not choices:
            raise MalformedResponse("response body lacks `choices`")
    builder = _Builder(kind, tokens_as_ids)
    builder.ingest(obj, where="response body")
    return builder.finish()


def parse_usage(body: bytes | str, kind: Kind = "completions") -> dict[str, Any] | None:
    """A non-streamed body checked as a completion (an object with ``choices``, not an error); its usage only.

    For traffic nobody analyses (background): the same faults as ``parse_body``, without building a
    ``Completion`` the caller would throw away."""
    obj = _loads(body, "response body")
    if kind == "generate":
        return usage_of(obj)
    checked_choices(obj)
    usage = obj.get("usage")
    return usage if isinstance(usage, dict) else None


def checked_choices(obj: Any) -> list[Any]:
    """A whole OpenAI-style body's ``choices``, once the body is known to be an object that is no error and
    has some; raises ``MalformedResponse`` (``StreamError`` for an error the server reported) otherwise."""
    if not isinstance(obj, dict):
        raise MalformedResponse(f"response body is a JSON {type(obj).__name__}, not an object")
    if obj.get("error"):
        raise StreamError(_error_message(obj["error"]))
    if obj.get("object") == "error":
        raise StreamError(_error_message(obj))
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedResponse("response body lacks `choices`")
    return choices


class StreamAccumulator:
    """Folds the ``data`` payloads of a streamed response into one ``Completion``.

    ``add`` returns True when the payload carried a generated token (time the first one by it);
    ``[DONE]`` sets ``done``. A stream that ends without ``done`` is truncated: ``finish`` still
    returns what arrived, and the caller records the truncation.
    """

    __slots__ = ("_builder", "chunks", "done")

    def __init__(self, kind: Kind, *, tokens_as_ids: bool = False) -> None:
        self._builder: _Builder | GenerateBuilder = (
            GenerateBuilder() if kind == "generate" else _Builder(kind, tokens_as_ids)
        )
        self.done = False
        self.chunks = 0

    def add(self, event_data: str) -> bool:
        """Consume one SSE ``data`` payload; raises ``MalformedResponse`` / ``StreamError``."""
        if event_data == "[DONE]" or (len(event_data) < 16 and event_data.strip() == "[DONE]"):
            self.done = True
            return False
        self.chunks += 1
        where = f"stream chunk {self.chunks}"
        return self._builder.ingest(_loads(event_data, where), where=where)

    def finish(self) -> Completion:
        return self._builder.finish()
