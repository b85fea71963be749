"""The re-score request: a canary's prompt ids plus its output ids sent back teacher-forced, and its answer read.

Why: are the logprobs a rollout returns those a teacher-forced re-score of the same ids gives (issue 55)? The
re-score asks each dialect for the logprob of every given token at every position: vLLM's completions with the
ids as the prompt, ``max_tokens: 1`` and ``prompt_logprobs: k`` (``choices[0].prompt_logprobs``: null for the
first position, then per position ``{"<token_id>": {"logprob", "rank", "decoded_token"}}``, the given token and
the top k); SGLang's ``/generate`` with ``input_ids``, ``return_logprob``, ``logprob_start_len: 0`` and
``top_logprobs_num: k`` (``meta_info.input_token_logprobs``: ``[logprob, id, text]`` per position, the first
logprob null; ``meta_info.input_top_logprobs``: per position a list of such triples, or null).

The answer is not trusted: one that carries no prompt logprobs, fewer positions than ids sent, or entries for
other ids than the ones sent is a ``RescoreFault`` with its kind and a sentence, never a row of zeros. Only the
output's positions are kept (``Rescored``), in the canary record's shape (token strings and logprobs, most
likely first), so the report compares them with the decode's as they are.

Pure: bodies and bytes in, typed values out; no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, get_args

import orjson

from loadgen.core.wire.types import Kind

MAX_TOP_K = 20  # vLLM's bound on prompt_logprobs (the embedded engine's too)

# why an answer gave no usable re-score (the report's "unmeasured" reasons, beside the transport's error kinds)
RescoreFaultKind = Literal[
    "no_prompt_ids",  # the canary's answer carried no prompt token ids, so there is nothing to send back
    "no_decode_logprobs",  # the canary's answer carried no output ids or no logprobs to compare with
    "no_prompt_logprobs",  # the answer holds no prompt logprobs at all (the field ignored, or null)
    "fewer_positions",  # fewer positions than ids sent
    "other_ids",  # a position's entries do not include the id sent there
    "malformed",  # not the shape the dialect documents
]
RESCORE_FAULT_KINDS: tuple[RescoreFaultKind, ...] = get_args(RescoreFaultKind)


@dataclass(frozen=True, slots=True)
class Rescored:
    """The output positions' re-score: the given token's logprob at each, and the top k there (most likely
    first, as the canary record's ``top_logprobs``; None where none were asked or given)."""

    logprobs: list[float]
    top_logprobs: list[list[tuple[str, float]]] | None


@dataclass(frozen=True, slots=True)
class RescoreFault:
    kind: RescoreFaultKind
    message: str


def rescore_body(kind: Kind, *, model: str, prompt_ids: list[int], output_ids: list[int], top_k: int) -> dict[str, Any]:
    """The body that re-scores ``prompt_ids + output_ids`` in one prefill, generating one token it ignores."""
    if not prompt_ids or not output_ids:
        raise ValueError("rescore_body: needs prompt ids and output ids")
    k = max(0, min(top_k, MAX_TOP_K))
    ids = [*prompt_ids, *output_ids]
    if kind == "generate":
        return {
            "input_ids": ids,
            "sampling_params": {"max_new_tokens": 1, "temperature": 0},
            "return_logprob": True,
            "logprob_start_len": 0,
            "top_logprobs_num": k,
            "return_text_in_logprobs": True,
            "stream": False,
        }
    if kind != "completions":
        raise ValueError(f"rescore_body: kind {kind!r} takes no token ids as its prompt (completions, generate)")
    return {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": k, "stream": False}


def parse_rescore(
    kind: Kind, body: bytes | str, *, prompt_ids: list[int], output_ids: list[int], tokens_as_ids: bool = False
) -> Rescored | RescoreFault:
    """The output positions' re-score from an answer to ``rescore_body``, or the fault that makes it unusable.

    ``tokens_as_ids``: the canary's token strings were vLLM's ``token_id:N``; the alternatives are named so too,
    so the report can match them with the decode's."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return RescoreFault("malformed", f"the answer is not JSON ({exc})")
    if not isinstance(obj, dict):
        return RescoreFault("malformed", f"the answer is a JSON {type(obj).__name__}, not an object")
    ids = [*prompt_ids, *output_ids]
    rows = _generate_rows(obj) if kind == "generate" else _vllm_rows(obj)
    if isinstance(rows, RescoreFault):
        return rows
    if len(rows) < len(ids):
        return RescoreFault(
            "fewer_positions", f"{len(rows)} positions re-scored of the {len(ids)} ids sent ({len(prompt_ids)} prompt)"
        )
    logprobs: list[float] = []
    tops: list[list[tuple[str, float]]] = []
    for i in range(len(prompt_ids), len(ids)):
        given, entries = rows[i]
        if ids[i] not in entries or (given is not None and given != ids[i]):
            got = given if given is not None else sorted(entries)[:3]
            return RescoreFault("other_ids", f"position {i} was scored for id(s) {got}, not the id sent, {ids[i]}")
        logprobs.append(entries[ids[i]][1])
        top = sorted(entries.items(), key=lambda e: (e[1][0], -e[1][1], e[0]))
        tops.append([(f"token_id:{t}" if tokens_as_ids else name, lp) for t, (_, lp, name) in top])
    return Rescored(logprobs, tops if any(len(t) > 1 for t in tops) else None)


# per position: the id the answer says it scored (None where the shape does not say), and every entry given,
# id -> (rank, logprob, token string)
_Row = tuple[int | None, dict[int, tuple[float, float, str]]]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) or value == -math.inf else None


def _vllm_rows(obj: dict[str, Any]) -> list[_Row] | RescoreFault:
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return RescoreFault("malformed", "the answer has no choices")
    positions = choices[0].get("prompt_logprobs")
    if positions is None:
        return RescoreFault("no_prompt_logprobs", "the answer carries no `prompt_logprobs` (the field was ignored)")
    if not isinstance(positions, list):
        return RescoreFault("malformed", f"`prompt_logprobs` is a {type(positions).__name__}, not a list")
    rows: list[_Row] = [(None, {})] if positions else []  # the first position has no logprob
    for i, pos in enumerate(positions[1:], start=1):
        if not isinstance(pos, dict):
            return RescoreFault("malformed", f"`prompt_logprobs[{i}]` is not an object of token ids")
        entries: dict[int, tuple[float, float, str]] = {}
        for key, entry in pos.items():
            lp = _number(entry.get("logprob")) if isinstance(entry, dict) else None
            if lp is None or not str(key).lstrip("-").isdigit():
                return RescoreFault("malformed", f"`prompt_logprobs[{i}]`: entry {key!r} has no numeric logprob")
            rank = _number(entry.get("rank"))
            entries[int(key)] = (math.inf if rank is None else rank, lp, str(entry.get("decoded_token") or key))
        rows.append((None, entries))
    return rows


def _generate_rows(obj: dict[str, Any]) -> list[_Row] | RescoreFault:
    meta = obj.get("meta_info")
    given = meta.get("input_token_logprobs") if isinstance(meta, dict) else None
    if given is None:
        return RescoreFault("no_prompt_logprobs", "the answer carries no `meta_info.input_token_logprobs`")
    assert isinstance(meta, dict)
    tops = meta.get("input_top_logprobs")
    if not isinstance(given, list) or (tops is not None and not isinstance(tops, list)):
        return RescoreFault("malformed", "`meta_info.input_token_logprobs` is not a list")
    rows: list[_Row] = []
    for i, triple in enumerate(given):
        if not isinstance(triple, list) or len(triple) < 2 or type(triple[1]) is not int:
            return RescoreFault("malformed", f"`input_token_logprobs[{i}]` is not [logprob, id, text]")
        lp = _number(triple[0])
        if lp is None:
            rows.append((triple[1], {}))  # the first position (no logprob)
            continue
        entries = {triple[1]: (math.inf, lp, str(triple[2]) if len(triple) > 2 else str(triple[1]))}
        alts = tops[i] if tops is not None and i < len(tops) else None
        for rank, alt in enumerate(alts or [], start=1):
            alt_lp = _number(alt[0]) if isinstance(alt, list) and len(alt) >= 2 else None
            if alt_lp is None or type(alt[1]) is not int:
                return RescoreFault("malformed", f"`input_top_logprobs[{i}]` holds an entry not [logprob, id, text]")
            old = entries.get(alt[1])
            entries[alt[1]] = (rank, alt_lp if old is None else old[1], str(alt[2]) if len(alt) > 2 else str(alt[1]))
        rows.append((triple[1], entries))
    return rows
