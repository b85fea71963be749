"""The shape of ``comparison.json`` as TypedDicts: what ``loadgen compare`` and ``loadgen matrix`` write and
their pages read.

Why apart from ``reports.model.report``: a comparison is made of reports but is its own document with its own
readers (``reports.compare.md``, ``reports.compare.html``, ``reports.render.plots``); this module names its
keys and their types and nothing else. Annotations are evaluated, as in ``reports.model.report``, so
``NotRequired`` is seen at run time.
"""

from typing import Literal, NotRequired, TypedDict

FigureName = Literal[  # in the order comparison.html shows them (reports.render.compare_cells.FIGURES)
    "canaries",
    "errors",
    "unique_completions",
    "diverged",
    "divergence_rate",
    "earliest_divergence",
    "modal_share",
    "drift_max",
    "bitwise_equal_share",
]
FigureRow = dict[FigureName, float | None]  # one run's figures (``reports.compare.runs.figures``), or its deltas


class CostRow(TypedDict):
    """``reports.analysis.cost.cost_row``: one run's cost beside its determinism at a level."""

    background_tokens_per_s: float | None
    canary_latency_p50: float | None
    canary_latency_p99: float | None
    unique_completions: int | None
    divergence_rate: float | None


class ComparedFigures(TypedDict):
    runs: list[FigureRow | None]  # None: the canary or the level is missing from that run
    deltas: list[FigureRow | None]  # against the first run


class ComparedLevel(ComparedFigures):
    concurrency: int


class ComparedCost(TypedDict):
    concurrency: int | Literal["overall"]
    runs: list[CostRow | None]


class ComparedCanary(TypedDict):
    id: str
    verdicts: list[str | None]
    reference_kinds: list[str | None]
    overall: ComparedFigures
    levels: list[ComparedLevel]
    cost: NotRequired[list[ComparedCost]]


class ComparedRun(TypedDict):
    name: str
    label: NotRequired[str]  # A, B, ...; comparisons from before the letters lack it
    id: str | None
    model: str | None
    endpoint: str | None
    labels: dict[str, str]
    server: str | None
    batch_invariant: NotRequired[bool | None]


class ReferenceCheck(TypedDict):
    """One canary's reference completion in one run against another run's (``reports.compare.references``)."""

    canary: str
    run: str  # run names, as in ``runs``
    compared_with: str
    verdict: Literal["same", "diverged", "no reference", "not in both runs"]
    first_divergence: int | None  # None: the same, or no position known
    unit: Literal["token", "character"]
    token: str | None  # this run's token at the first divergence; None past its end
    reference_token: str | None


class ComparedColdBootCanary(TypedDict):
    """One canary of one cold-boot run (``reports.analysis.coldboot.ColdBootCanary``, without the completions'
    texts)."""

    id: str
    boots_counted: int
    first_differs_rest_agree: int
    distinct_first: int
    distinct_warm: int
    boots_with_errors: int
    sequences: list[str]  # per boot, its completions in order as letters ("A B B B"; x: a failed request)


class ComparedColdBoot(TypedDict):
    """A cold-boot run's answer (``reports.analysis.coldboot.compared``): does the first request after a boot differ?"""

    run: str  # the run's name, as in ``runs``
    boots: int
    requests_per_boot: int
    canaries: list[ComparedColdBootCanary]


class KvSourceRow(TypedDict):
    """One canary in one run: its records (ok, not warm-up) by KV source, and the asked path's proof."""

    canary: str
    run: str  # run names, as in ``runs``
    records: int
    by_source: dict[str, int]  # provenance ("computed", "gpu_prefix", "offload", "transfer", "unknown") -> records
    asked: str | None
    proven: int
    not_proven: int


class KvEffectRow(TypedDict):
    """One run's answers to one request sent alone, whose KV came one way (``report.json``'s ``kv_effect``)."""

    run: str
    provenance: str
    canaries: list[str]
    answers: int
    same_tokens: int  # the computed reference's tokens
    bitwise_gpu_hit: int | None
    max_logprob_drift_gpu_hit: float | None
    max_logprob_drift: float | None  # against the computed reference
    tier_moved: bool | None  # the run's offload tier stored and loaded (null: none asked for, or no counters)


class ComparedKv(TypedDict):
    """``comparison.json``'s ``kv`` (``reports.compare.kv``): where each run's canaries got their KV."""

    sources: list[KvSourceRow]
    effects: list[KvEffectRow]


class Comparison(TypedDict):
    """``comparison.json``, schema 1 (``reports.compare.runs.compare_reports``)."""

    schema: int
    frontier: NotRequired[bool]
    runs: list[ComparedRun]
    canaries: list[ComparedCanary]
    references: NotRequired[list[ReferenceCheck]]  # where runs were compared by reference (``loadgen matrix``)
    coldboot: NotRequired[list[ComparedColdBoot]]  # the cold-boot runs among them (``loadgen matrix``, ``compare``)
    kv: NotRequired[ComparedKv]  # where some run's report says where its canaries' KV came from
