"""The canary record: one line of ``canaries*.jsonl`` per canary request, written and read through one type.

Pure data and (de)serialisation; no file I/O here. The on-disk keys are a contract (docs/design.md):
add fields freely, rename none without bumping ``SCHEMA``. ``tests/loadgen/core/test_record.py``
pins them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from loadgen.core.errors import RunFolderError

SCHEMA = 1

Phase = Literal["warmup", "baseline", "sweep"]
Status = Literal["ok", "error"]

# Error kinds a failed request is recorded with. Faults are data: every kind is counted in reports.
ErrorKind = Literal[
    "connection",  # refused, reset before a response, DNS failure
    "timeout",  # connect or read timeout, or the request's total deadline
    "http_status",  # a non-2xx answer; ``http_status`` holds the code
    "truncated_stream",  # the stream ended without ``[DONE]`` or the connection dropped mid-body
    "malformed_body",  # a body or SSE chunk that is not the JSON an OpenAI-style server sends
    "stream_error",  # the server reported an error inside a 200 stream (``{"error": ...}``)
    "cancelled",  # cut off by a scale-down or the end of the run
    "response_too_large",  # more bytes than ``endpoint.max_response_bytes``: cut there
]
ERROR_KINDS: tuple[ErrorKind, ...] = get_args(ErrorKind)

# (token, logprob) alternatives at one position, most likely first.
TopLogprobs = list[list[tuple[str, float]]]


@dataclass(slots=True)
class CanaryRecord:
    """One canary request and what came back. ``None`` means "not available", never zero."""

    run_id: str
    canary_id: str
    request_id: str
    phase: Phase
    level: int  # background users the shape held when this canary was sent (0 for warm-up/baseline)
    inflight_at_send: int  # requests in flight from this generator process at send time, this one excluded
    sent_at: float  # epoch seconds
    status: Status
    latency_s: float | None = None  # own clock: send to last byte
    ttft_s: float | None = None  # own clock: send to first generated token (streaming only)
    error_kind: ErrorKind | None = None
    error_message: str | None = None
    http_status: int | None = None
    endpoint: str = "completions"  # "completions" or "chat"
    stream: bool = False
    request: dict[str, Any] = field(default_factory=dict)  # the JSON body sent (never headers)
    token_ids: list[int] | None = None
    tokens: list[str] | None = None
    logprobs: list[float] | None = None
    top_logprobs: TopLogprobs | None = None
    text: str | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    engine_running: float | None = None  # legacy: the running gauge nearest sent_at (reports now join a window)
    worker: str = ""  # which generator process wrote the record
    # "reset" (cache and offload tier reset just before), "salt" (fresh cache_salt), "gpu_reset" (the GPU prefix
    # cache alone reset) or "flush" (filler prompts turned the GPU cache over); None: kept (docs/design.md)
    cache_action: str | None = None
    cache_reset_status: int | None = None  # HTTP status of the reset, or None where it failed to connect
    cache_reset_ok: bool | None = None  # the engine said it dropped the cache (vLLM: 200 {"success": false} = no)
    flush_tokens: int | None = None  # "flush": the filler prompts' tokens (the engine's count, else their words)
    schema: int = SCHEMA
    boot: int | None = None  # cold-boot studies: which engine start (1-based) this request was sent to
    boot_index: int | None = None  # cold-boot studies: this canary's request number within its boot (1-based)
    # the level as the engine saw it (docs/design.md, "held"); None where a run predates them or nothing was measured
    burst: bool = False  # one of a burst's copies: ``level`` counts the copies in flight, this one included
    held_at_send: bool | None = None  # every background slot of the level had a request the server had started
    background_held_at_send: int | None = None  # background slots held at send, over every generator process
    # the streamed background came in one piece (first and last token together: a buffering proxy), so its slots
    # were held from their send (loadgen.load.holding.Buffering); None where not a sweep canary above level 0
    background_buffered: bool | None = None
    # which side of its level the sending process's background erred on (loadgen.core.band): "floor" (streamed
    # token by token, each slot handing over before its request ends) or "ceiling" (progress unseen: non-streamed,
    # a stream that came in one piece, or no hand-over; each slot sends its next request once the last has ended);
    # None where not a sweep canary above level 0
    level_bound: str | None = None
    # the sweep's background.phase when this canary was sent (docs/design.md, "Background aimed at one phase"):
    # "all" (background held throughout), "decode", "from:<p>" or "prefill"; None for warm-up, baseline, burst
    # copies and runs that predate it
    background_phase: str | None = None
    engine_batch_sizes: list[int] | None = None  # the engine's own batch size at every step of this request
    # which choice of an n > 1 request this is (0-based; its canary_id then ends ".choice<j>"); None: n = 1
    choice: int | None = None
    # the answer's own id (OpenAI ``id``), where it carried one: the engine's name for this request, which joins the
    # record to the engine step trace where a router sent the engine its own request id (docs/design.md, "Joining ids")
    answer_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, where: str = "record") -> CanaryRecord:
        """Build a record from a decoded JSON object; ignores unknown keys, rejects unknown schemas."""
        known = known_fields(cls, raw, schema=SCHEMA, what="canary record", where=where)
        top = known.get("top_logprobs")
        if top is not None:  # null: a NaN or infinite logprob the server sent, which JSON writes as null
            known["top_logprobs"] = [[(str(t), math.nan if lp is None else float(lp)) for t, lp in pos] for pos in top]
        return cls(**known)


@functools.cache
def _field_sets(cls: type) -> tuple[frozenset[str], frozenset[str]]:
    """A record dataclass's field names, and those without a default (computed once per class)."""
    fields = dataclasses.fields(cls)
    no_default = [f for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    return frozenset(f.name for f in fields), frozenset(f.name for f in no_default)


def known_fields(cls: type, raw: dict[str, Any], *, schema: int, what: str, where: str) -> dict[str, Any]:
    """The keys of ``raw`` that are fields of the record dataclass ``cls`` (unknown keys ignored), after refusing
    a schema other than ``schema`` and a missing required field, each with an error naming ``where``. The one
    reading rule of every record type (canary, re-score)."""
    got = raw.get("schema")
    if got != schema:
        raise RunFolderError(f"{where}: {what} schema {got!r} is not supported (expected {schema})")
    names, required = _field_sets(cls)
    known = {k: v for k, v in raw.items() if k in names}
    missing = required - known.keys()
    if missing:
        raise RunFolderError(f"{where}: {what} lacks required field(s) {sorted(missing)}")
    return known
