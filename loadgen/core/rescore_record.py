"""The re-score record: one line of ``rescores*.jsonl`` per teacher-forced re-score of a canary completion.

Why: the re-score check (docs/design.md, "The re-score check") is sent from two places, the canary user right
after its canary ("at level", the level's background still running) and the run's owner once the load has ended
("alone"), and read by the report; one type keeps the three agreeing. A record carries what the comparison
needs on its own: the ids sent, the decode's logprobs (the canary record's) and the re-score's, so the report
reads no canary file to judge it. ``None`` means "not available", never zero.

Pure data and (de)serialisation; no file I/O here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from loadgen.core.record import known_fields

SCHEMA = 1
RESCORE_FILE_GLOB = "rescores*.jsonl"
ALONE_FILE = "rescores-alone.jsonl"  # the run owner's pass; the canary users write rescores[-<worker>].jsonl

RescoreMode = Literal["alone", "at_level"]
RescoreStatus = Literal["ok", "error"]


@dataclass(slots=True)
class RescoreRecord:
    """One re-score. ``status`` ``error``: ``error_kind`` is a transport error kind (``loadgen.core.record``) or
    a ``loadgen.core.wire.rescore.RescoreFaultKind`` (the engine answered, but nothing usable)."""

    run_id: str
    canary_id: str
    canary_request_id: str  # the canary record's request_id: the completion re-scored (alone: its first)
    request_id: str  # this request's own, sent as X-Request-Id
    mode: RescoreMode
    phase: str  # the canary's
    level: int  # the canary's
    sent_at: float
    status: RescoreStatus
    latency_s: float | None = None
    error_kind: str | None = None
    error_message: str | None = None
    http_status: int | None = None
    endpoint: str = "completions"
    prompt_ids: list[int] | None = None
    output_ids: list[int] | None = None
    decode_logprobs: list[float] | None = None  # the canary's own (at level; alone: None, the report joins by ids)
    decode_top: list[list[tuple[str, float]]] | None = None
    logprobs: list[float] | None = None  # the re-score's, one per output position
    top_logprobs: list[list[tuple[str, float]]] | None = None
    top_k: int = 0  # the alternatives asked per position
    worker: str = ""
    schema: int = SCHEMA

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, where: str = "record") -> RescoreRecord:
        """A record from a decoded JSON object; ignores unknown keys, rejects unknown schemas."""
        known = known_fields(cls, raw, schema=SCHEMA, what="re-score record", where=where)
        for key in ("logprobs", "decode_logprobs"):  # JSON writes a NaN as null
            if known.get(key) is not None:
                known[key] = [math.nan if v is None else float(v) for v in known[key]]
        for key in ("top_logprobs", "decode_top"):
            if known.get(key) is not None:
                known[key] = [[(str(t), math.nan if v is None else float(v)) for t, v in pos] for pos in known[key]]
        return cls(**known)
