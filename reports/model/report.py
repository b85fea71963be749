"""The shape of ``report.json`` (and of ``comparison.json``) as TypedDicts: the one contract between the
modules that build a report and those that read it.

Why TypedDicts: the report is a plain dict, written as it is by orjson (byte for byte what the goldens
hold) and read back from files by ``check`` and ``compare``; a TypedDict types that dict without
converting it, so mypy checks every key a producer writes and a reader takes. docs/design.md
("``report.json``") describes each figure; this module only names the keys and their types.

Keys added to schema 1 after its first reports are ``NotRequired``: a ``report.json`` written before
them lacks them, so readers take them with ``.get`` (``build_report`` always writes them). Types and
the one schema check (``is_report``) only, importing nothing beyond the ground floor's own types and the
co-residency types (``reports.model.coresidency``): the run's owner imports ``reports.analysis.health``,
which uses these, in the Locust processes, and the terminal summary reads a report without the report stack.

Annotations here are evaluated (no ``from __future__ import annotations``): Python 3.11 sees
``NotRequired`` in a class-based TypedDict only then, and ``tests/reports/test_model.py`` walks the
model at run time.

Why this length: the report is one tree, and its sections' own parts live in their modules already (co-residency,
engine steps, seeds, the re-score check); what stays is the per-canary figures every reader takes together.
"""

from typing import Literal, NotRequired, TypedDict, TypeGuard

from loadgen.core.claims import Claim
from loadgen.core.identity import IdentityKind
from loadgen.core.manifest import EndedByClaim, ServerSettings
from reports.model.coresidency import CoResidency, CoResidencyGroup, Sides, SidesCoResidency, Witness
from reports.model.engine_steps import EngineSteps, EngineTrace
from reports.model.provenance import CanaryProvenance, KvEffect, KvOffloadCheck
from reports.model.rescore import RescoreCheck
from reports.model.seeds import SeedContracts

# -- one canary's figures ------------------------------------------------------------------------


class Latency(TypedDict):
    p50: float
    p90: float
    p99: float
    max: float
    n: int


class Median(TypedDict):
    median: float | None


class FirstDivergence(TypedDict):
    min: int
    median: float
    max: int
    histogram: list[list[int]]  # [[position, count], ...] by position


class LogprobDrift(TypedDict):
    max: float
    mean: float
    bitwise_equal_share: float
    compared: int
    positions: NotRequired[int]  # token positions measured, over the ``compared`` completions (older reports lack it)


ForkClass = Literal["near_tie", "structural", "unclassified"]  # reports.analysis.forks.CLASSES


class ForkClasses(TypedDict):
    near_tie: int
    structural: int
    unclassified: int


class Figures(TypedDict):
    """What a level, the whole sweep (``overall``) or a co-residency group says
    (``reports.analysis.canary.summarise``)."""

    canaries: int
    errors: int
    error_kinds: dict[str, int]
    completions: int
    unique_completions: int
    diverged: int | None  # None: no reference
    divergence_rate: float | None
    divergence_rate_ci95: list[float] | None  # [lo, hi]
    modal_share: float | None
    reference_share: float | None
    earliest_divergence: int | None
    first_divergence: FirstDivergence | None
    fork_classes: NotRequired[ForkClasses | None]
    logprob_drift: LogprobDrift | None
    observed_inflight: Median
    engine_running: Median | None
    latency_s: Latency | None
    co_residency: NotRequired[CoResidency]
    co_residency_sides: NotRequired[SidesCoResidency]  # prefill/decode runs only


class Level(Figures):
    concurrency: int
    claim: NotRequired[Claim]
    # why the level gives no verdict (its load was not there: ``reports.analysis.level_load.not_measured``);
    # None: it does
    not_measured: NotRequired[str | None]


class Overall(Figures):
    first_divergent_concurrency: int | None


class IdentityCounts(TypedDict):
    """Completions, and how many of them carried each identity (``reports.analysis.identity.choose``)."""

    completions: int
    token_ids: int
    tokens: int
    text: int


class Reference(TypedDict):
    kind: Literal["baseline", "modal"]
    identity: IdentityKind
    unit: NotRequired[Literal["token", "character"]]
    identity_available: IdentityCounts
    identity_note: str | None
    canaries: int
    errors: int
    completions: int
    unique_completions: int
    self_consistent: bool | None
    request_id: str | None
    length: int | None
    text: str | None
    tokens: list[str | None]  # None: past the end
    earliest_divergence: int | None


Fork = TypedDict(
    "Fork",
    {
        "position": int,
        "reference_token": str | None,
        "other_token": str | None,
        "reference_token_id": int | None,
        "other_token_id": int | None,
        "count": int,
        "levels": dict[str, int],  # concurrency (as a JSON key) -> count
        "first_seen_concurrency": int,
        "top1_top2_gap": float | None,
        "class": NotRequired[ForkClass],
        "rounding_step": NotRequired[float | None],
        "gap_steps": NotRequired[float | None],
    },
)


class ForkMethod(TypedDict):
    """How forks were classified (``reports.analysis.forks.method``)."""

    relative_step: float
    near_tie_steps: float
    magnitude: str


class GapBin(TypedDict):
    lo: float
    hi: float | None  # None: the last bin is open
    count: int


class ForkGaps(ForkMethod):
    histogram: list[GapBin]


class DriftHeatmap(TypedDict):
    """``reports.analysis.heatmap.drift_by_position``: position bins x levels."""

    positions: int
    bin_width: int
    levels: list[int]
    max: list[list[float | None]]  # per level, per column; None where nothing was compared
    compared: list[list[int]]


class CanaryFigures(TypedDict):
    """Everything ``reports.analysis.canary.analyse_canary`` says about one canary."""

    reference: Reference
    overall: Overall
    levels: list[Level]
    forks: list[Fork]
    fork_gaps: NotRequired[ForkGaps]
    drift_heatmap: NotRequired[DriftHeatmap | None]
    by_co_residency: NotRequired[list[CoResidencyGroup] | None]
    sides: NotRequired[Sides]  # prefill/decode runs only
    engine_steps: NotRequired[EngineSteps]  # runs with an engine step trace only
    provenance: NotRequired[CanaryProvenance]  # where its records' KV came from (reports.analysis.provenance)


class CanaryAnalysis(CanaryFigures):
    id: str


class Canary(CanaryAnalysis):
    """One entry of ``canaries``: the analysis and its one-sentence verdict (``reports.analysis.build.verdict``)."""

    verdict: str


# -- the run around the canaries ----------------------------------------------------------------


class ServerConfig(ServerSettings):
    """``run.server_config``: what the server stated about its settings, and a line saying it."""

    summary: str


class RunServer(TypedDict):
    """One server behind the endpoint, from the manifest's ``servers``
    (``reports.analysis.sides_notes.run_servers``)."""

    name: str
    role: str
    base_url: str | None
    metrics_url: str | None
    samples: int  # /metrics samples read back from its file
    notice: str | None  # why it has none, from its scraper


class RunSection(TypedDict):
    id: str | None
    endpoint: str | None
    endpoint_kind: str | None
    stream: bool | None
    model: str | None
    server_version: str | None
    server_config: NotRequired[ServerConfig]
    labels: dict[str, str]
    started: str | None
    finished: str | None
    status: str | None
    tool_version: str | None
    levels: list[int]
    canaries_per_level: int | None
    background_phase: NotRequired[str]  # background.phase (docs/design.md, "Background aimed at one phase")
    claim_max_rate: NotRequired[float | None]
    levels_ended_by_claim: NotRequired[list[EndedByClaim]]
    notices: list[str]
    scenario_path: str | None
    servers: NotRequired[list[RunServer]]  # prefill/decode runs only: the servers behind the endpoint
    x_axis_unmeasured: NotRequired[str | None]  # why no canary's co-residency was scraped (also in notices)
    witness: NotRequired[Witness]  # the record the sweep's co-residency came from, and how fresh it was
    engine_trace: NotRequired[EngineTrace]  # runs with an engine step trace only
    kv_offload: NotRequired[KvOffloadCheck]  # an engine asked for an offload tier: did its counters move


class InputFile(TypedDict):
    name: str
    records: int
    skipped_lines: int
    skipped_line_numbers: list[int]
    # of those, the records no column can hold: line (as a JSON key) -> the field and what it should be
    malformed_lines: NotRequired[dict[str, str]]


class InputSection(TypedDict):
    files: list[InputFile]
    records: int
    skipped_lines: int
    engine_running_joined: bool


class Throughput(TypedDict):
    """``reports.analysis.cost.throughput``: one level's background wall time and completion tokens per second."""

    wall_s: float | None
    tokens_per_s: float | None


class BackgroundLevel(TypedDict):
    concurrency: int | None  # None: requests outside any level
    requests: int
    errors: int
    latency_s: Latency | None
    completion_tokens: float | None
    wall_s: NotRequired[float | None]
    tokens_per_s: NotRequired[float | None]


class CacheEvidence(TypedDict):
    cached_tokens: int
    counters: int


class CacheExpectation(TypedDict):
    """``reports.analysis.cache_checks.cache_expectations``: one canary that expects, or acts on, the prefix cache."""

    expect: str | None
    cache: str
    canaries: int
    mechanisms: dict[str, int]
    resets_refused: int
    hits: int
    misses: int
    evidence: CacheEvidence
    counters_shared: int
    reported: int
    met: int
    violated: int
    unknown: int


class ScenarioChecks(TypedDict):
    temperature_zero: bool | None
    distinct_request_bodies: dict[str, int]  # canary id -> distinct bodies
    finish_reasons: dict[str, int]
    baseline_present: dict[str, bool]
    baseline_self_consistent: dict[str, bool | None]
    run_finished: bool
    skipped_lines: int
    cache_expectations: NotRequired[dict[str, CacheExpectation]]


class BackgroundErrors(TypedDict):
    """``health.background``: the run's background requests that failed
    (``reports.analysis.level_load.background_errors``)."""

    requests: int
    errors: int
    share: float | None
    error_kinds: dict[str, int]
    first_error: str | None  # the first failure by send time: kind, HTTP status and the server's message, one line


class HealthFacts(TypedDict):
    status: str | None
    completed: bool
    canaries: int
    errors: int
    error_kinds: dict[str, int]
    first_error: str | None  # the first failed canary by send time, in one line (``level_load.describe_error``)
    error_rate: float | None
    endpoint_failed: bool
    levels_without_completions: dict[str, list[int]]  # canary id -> planned levels without completions
    write_failures: dict[str, int]  # ``collectors.losses.ProcessFiles``: canaries, background, processes, unreadable
    records_lost: int
    canaries_reported_not_read: int
    torn_files: list[str]
    unusable_numbers: int
    records_with_unusable_numbers: int
    non_finite_figures: int
    background: BackgroundErrors | None  # None: the run recorded no background
    levels_not_measured: dict[str, list[int]]  # canary id -> sweep levels that give no verdict


class Health(HealthFacts):
    """``reports.analysis.health.run_health``: the facts, what to read first, and notices with counts."""

    headline: list[str]
    notices: list[str]


class ClientLoadLevel(TypedDict):
    concurrency: int
    processes: int
    busiest_share: float
    mean_share: float
    busiest_demand: float
    seconds: float
    generator_bound: bool


class ClientLoad(TypedDict):
    bound_share: float
    levels: list[ClientLoadLevel]
    generator_bound_levels: list[int]
    summary: str | None


REPORT_SCHEMA = 1


class Report(TypedDict):
    """``report.json``, schema 1 (``reports.analysis.build.build_report``; read back by
    ``reports.render.writer.load_report``).

    With exactly one canary its ``verdict``, ``reference``, ``overall``, ``levels`` and ``forks`` are also
    copied to the top level, for tools written against the single-canary contract."""

    schema: int
    run: RunSection
    input: InputSection
    canaries: list[Canary]
    background: list[BackgroundLevel] | None
    scenario_checks: ScenarioChecks
    client_load: NotRequired[ClientLoad]  # runs with client CPU samples only
    seed_contracts: NotRequired[SeedContracts]  # runs with a sampled canary only (reports.analysis.seed_contracts)
    rescore: NotRequired[RescoreCheck]  # runs with a canary that asked for a re-score (reports.analysis.rescore)
    # one request answered alone from two or more KV sources (reports.analysis.kv_effect)
    kv_effect: NotRequired[list[KvEffect]]
    health: NotRequired[Health]
    verdict: NotRequired[str]
    reference: NotRequired[Reference]
    overall: NotRequired[Overall]
    levels: NotRequired[list[Level]]
    forks: NotRequired[list[Fork]]


def is_report(raw: object) -> TypeGuard[Report]:
    """A decoded ``report.json`` of this schema: an object with ``schema`` 1 and a ``canaries`` list."""
    return isinstance(raw, dict) and raw.get("schema") == REPORT_SCHEMA and isinstance(raw.get("canaries"), list)
