"""The shape of ``report.json``'s ``canaries[i].provenance`` and ``run.kv_offload``: where each canary's KV came from.

Why a module of its own: the blocks are built by ``reports.analysis.provenance`` (docs/design.md, "Where the KV
came from") from an engine step trace or the engine's by-source counters, and exist only where one of them
spoke; their types stay beside the report's others in ``reports/model/`` but apart from ``report.py``.
TypedDicts only.
"""

from __future__ import annotations

from typing import Literal, TypedDict

ProvenanceLabel = Literal["computed", "gpu_prefix", "offload", "transfer", "unknown"]
EvidenceKind = Literal["engine_trace", "counters", "shared", "none"]


class FirstDivergenceSpan(TypedDict):
    min: int
    median: float


class ProvenanceGroup(TypedDict):
    """The canary's completions (ok, not warm-up) whose KV came one way, against the canary's reference."""

    provenance: ProvenanceLabel
    completions: int
    diverged: int | None  # null: the canary has no reference
    divergence_rate: float | None
    divergence_rate_ci95: list[float] | None
    first_divergence: FirstDivergenceSpan | None  # over the diverged ones
    max_logprob_drift: float | None  # the largest |logprob - reference logprob| before each first divergence


class UnprovenRecord(TypedDict):
    request_id: str
    phase: str
    level: int | None
    provenance: ProvenanceLabel
    reason: str


class CanaryProvenance(TypedDict):
    """``canaries[i].provenance``: per record (ok, not warm-up) its provenance and evidence, the path it asked for
    and whether that path is proven, and divergence grouped by provenance."""

    records: int
    evidence: dict[str, int]  # EvidenceKind -> records
    asked: str | None  # "offload", "transfer", "gpu_prefix or offload" (expect_cache = "hit"), or null
    proven: int  # asked records whose provenance is the asked path
    not_proven: int  # asked records whose provenance is known and another path (left out of that path's figures)
    unknown: int  # asked records without evidence: neither proven nor refuted
    reasons: dict[str, int]  # why not proven ("computed instead", ...) -> records
    not_proven_records: list[UnprovenRecord]  # the first ``listed_max``, in send order
    listed_max: int
    groups: list[ProvenanceGroup]


class KvOffloadCheck(TypedDict):
    """``run.kv_offload``: an engine asked for an offload tier, and whether its store/load counters moved."""

    asked_by: str  # "manifest" (engine.kv_offload) or "server" (its kv_offloading_size label)
    store_bytes: float | None  # the counters' rise over the run, summed over the servers that published them
    load_bytes: float | None
    moved: bool | None  # null: no engine published the counters


class KvEffectGroup(TypedDict):
    """The answers of one request, sent alone, whose KV came one way, against the block's reference."""

    provenance: ProvenanceLabel
    canaries: list[str]  # the canary ids that sent them
    answers: int
    same_tokens: int  # the reference's tokens
    bitwise: int  # the reference's tokens and every logprob bit for bit
    max_logprob_drift: float | None  # the largest |logprob - reference's| before each answer's first divergence
    first_divergence: int | None  # the earliest position where an answer's tokens left the reference's
    bitwise_gpu_hit: int | None  # bitwise equal to the modal GPU-prefix-hit answer (null: no GPU hit among them)
    max_logprob_drift_gpu_hit: float | None  # against that answer, before each first divergence


class KvEffect(TypedDict):
    """``report.json``'s ``kv_effect[i]``: one request body answered alone from two or more KV sources
    (``reports.analysis.kv_effect``)."""

    request_key: str  # equal for request bodies equal but for a cache salt
    reference: ProvenanceLabel  # the provenance whose modal answer is the reference (computed where present)
    reference_canary: str
    groups: list[KvEffectGroup]
