"""The shape of ``report.json``'s ``engine_steps`` block: what the engine's own steps say about each canary.

Why a module of its own: the block is built by ``reports.analysis.attribution`` from an engine step trace
(docs/design.md, "The engine step trace") and only exists where a trace was read; its types stay beside
the report's others in ``reports/model/`` but apart from ``report.py``. TypedDicts only.
"""

from __future__ import annotations

from typing import TypedDict

from reports.model.coresidency import ClientVsEngine


class StepAt(TypedDict):
    """The step that computed one output position of one canary record."""

    row: str  # the record's own row in it: "prefill" (its prompt, the last chunk) or "decode"
    kind: str  # "decode-only", "mixed" or "prefill-only"
    requests: int  # requests scheduled in the step, the canary included
    tokens: int  # tokens the step computed


class RecordDrift(TypedDict):
    """One canary record whose logprobs or tokens moved from the reference, with the steps that computed
    its first drift and its first flip (null where the trace holds no step for that position)."""

    request_id: str
    level: int
    first_drift: int  # first position whose chosen-token logprob was not bitwise the reference's
    first_flip: int | None  # first position whose token differed; null: the tokens never did
    drift_step: StepAt | None
    flip_step: StepAt | None


class FactorRow(TypedDict):
    """Positions computed under one value of a factor, before or at each record's first drift."""

    value: str
    positions: int
    drifts: int  # first drifts at those positions
    rate: float | None
    low: float | None  # Wilson 95% interval
    high: float | None


class Factor(TypedDict):
    factor: str  # "step kind", "others in the step", "tokens in the step", ...
    rows: list[FactorRow]
    separates: bool  # drift happened only under some values, and their interval lies above the others'


class EngineSteps(TypedDict):
    """``canaries[i].engine_steps``: the trace joined to this canary's records."""

    source: str  # the trace's writer: "embedded", "vllm", "sglang" (joined by ", " where several)
    records: int  # compared records (ok, not warm-up, with a reference)
    joined: int  # of those, records the trace holds steps for
    drifted: int  # joined records whose logprobs (or tokens) moved
    positions: int  # positions at risk: each joined record's positions up to its first drift
    factors: list[Factor]
    sentence: str  # the factor that separates drifted from undrifted positions, or that none does
    drifts: list[RecordDrift]  # the moved records, at most ``listed_max``, in send order
    listed_max: int


class TraceFileRead(TypedDict):
    name: str
    source: str  # its writer, from its records
    steps: int
    skipped: int  # lines that were not steps: a torn tail, or malformed (the first few described)
    malformed: dict[str, str]  # line number -> why


class EngineTrace(TypedDict):
    """``run.engine_trace``: the step trace files read and how they met the canary records."""

    files: list[TraceFileRead]
    steps: int
    records_joined: int  # canary records whose request id some step named
    gauge_vs_trace: ClientVsEngine | None  # the /metrics gauge's median over each life minus the trace's
