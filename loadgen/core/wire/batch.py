"""A burst's copies in one request: the body that carries every prompt, and its answer split per copy.

Why it exists: separate requests reach an engine one at a time through its HTTP and tokenizer front end
(SGLang's tokenizer manager took 37-194 ms to pass a burst of 16-62 separate requests to its scheduler on
an H200, so later copies found the earlier ones' prefixes cached), while one request with a prompt list
arrives whole and is prefilled as one batch: what SGLang's ``test_deterministic`` sends
(``sweep.burst_send = "one-request"``, docs/design.md, "Bursts in one request"). Dialects:

- ``completions`` (vLLM, SGLang, the embedded engine): ``prompt`` is a list; the answer has one choice per
  prompt, ``index`` saying which; ``usage`` is summed over the prompts, so no copy gets one;
- ``generate`` (SGLang's native route): ``text`` is a list; the answer is a JSON list of the single answers,
  in prompt order, each with its own ``meta_info`` (usage per copy).

The same split serves a canary with ``n > 1`` (one prompt, ``n`` choices, ``index`` saying which; chat too):
each choice is a part of its own (docs/design.md, "Sampled canaries and the seed contracts").

Pure: no I/O; it must not know about Locust or the record. A fault of the whole answer raises as
``parse_body`` does; a fault of one copy's part is that copy's alone (an element of the result).
"""

from __future__ import annotations

from typing import Any

from loadgen.core.wire.generate import GenerateBuilder
from loadgen.core.wire.response import _Builder, _error_message, _loads, checked_choices
from loadgen.core.wire.types import Completion, Kind, MalformedResponse, StreamError

_PROMPT_FIELD = {"completions": "prompt", "generate": "text"}
CopyAnswer = Completion | MalformedResponse | StreamError  # one copy's part of the answer, or what was wrong with it


def batch_body(kind: Kind, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    """One body carrying every body's prompt, in order; unstreamed. The bodies must ask the same apart from
    their prompts (the scenario checks the canaries; a difference here is a bug, raised as ValueError)."""
    field = _PROMPT_FIELD.get(kind)
    if field is None:
        raise ValueError(f"kind {kind!r} takes no prompt list")
    if not bodies:
        raise ValueError("a batch needs at least one body")
    rest = [{k: v for k, v in b.items() if k != field} for b in bodies]
    if any(r != rest[0] for r in rest[1:]):
        raise ValueError("the bodies of one request must differ only in their prompts")
    body = {**rest[0], field: [b[field] for b in bodies], "stream": False}
    body.pop("stream_options", None)
    return body


def parse_batch(kind: Kind, raw: bytes | str, n: int, *, tokens_as_ids: bool = False) -> list[CopyAnswer]:
    """The answer to a ``batch_body`` of ``n`` prompts, or to one prompt asking ``n`` choices (completions or
    chat): one entry per prompt or choice, in ``index`` order."""
    obj = _loads(raw, "response body")
    if kind == "generate":
        return _generate_parts(obj, n)
    return _completion_parts(kind, obj, n, tokens_as_ids)


def _generate_parts(obj: Any, n: int) -> list[CopyAnswer]:
    if isinstance(obj, dict) and obj.get("error"):
        raise StreamError(_error_message(obj["error"]))
    if not isinstance(obj, list):
        raise MalformedResponse(f"response body is a JSON {type(obj).__name__}, not the list {n} prompts get")
    if len(obj) != n:
        raise MalformedResponse(f"response body holds {len(obj)} answers for {n} prompts")
    return [_part(GenerateBuilder(), part, f"answer [{i}]") for i, part in enumerate(obj)]


def _completion_parts(kind: Kind, obj: Any, n: int, tokens_as_ids: bool) -> list[CopyAnswer]:
    by_index: dict[int, dict[str, Any]] = {}
    for choice in checked_choices(obj):
        index = choice.get("index") if isinstance(choice, dict) else None
        if type(index) is not int or not 0 <= index < n or index in by_index:
            raise MalformedResponse(f"response body: choice index {index!r} is not one of 0..{n - 1}, each once")
        by_index[index] = choice
    if len(by_index) != n:
        raise MalformedResponse(f"response body holds {len(by_index)} choices for {n} prompts")
    out: list[CopyAnswer] = []
    for i in range(n):
        part: dict[str, Any] = {"choices": [{**by_index[i], "index": 0}]}
        if (sizes := by_index[i].get("x_batch_sizes")) is not None:
            part["x_batch_sizes"] = sizes
        out.append(_part(_Builder(kind, tokens_as_ids), part, f"choice [{i}]"))
    return out


def _part(builder: GenerateBuilder | _Builder, part: Any, where: str) -> CopyAnswer:
    """One copy's part folded into its completion, or what was wrong with it (that copy's fault alone)."""
    try:
        builder.ingest(part, where=where)
        return builder.finish()
    except MalformedResponse as exc:  # StreamError included
        return exc
