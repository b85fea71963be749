"""The report's co-residency types: the batch each canary shared, per level, per group of others and per
side of a prefill/decode endpoint, and the record it was measured from.

Why apart from ``reports.model.report``: co-residency is the report's x-axis, measured and grouped by
its own modules (``reports.analysis.coresidency``, ``reports.analysis.sides``, ``reports.analysis.side_rule``)
and drawn by its own (``reports.render.sides``); they read these types and nothing else of the report's
shape. As in ``reports.model.report``: TypedDicts only, importing nothing of the project, annotations
evaluated (no ``from __future__ import annotations``) so ``tests/reports/test_model.py`` can walk them.
"""

from typing import Literal, TypedDict

# the engine's own batch sizes, else its /metrics running gauge, else the client's own requests in flight
CoResidencySource = Literal["engine_batch_sizes", "engine_trace", "metrics", "client"]
LevelBoundName = Literal["floor", "ceiling", "mixed"]  # loadgen.core.band; "mixed": canaries of both


class Spread(TypedDict):
    min: float | None
    median: float | None
    max: float | None


class ClientVsEngine(TypedDict):
    """How far the client's count of its own requests in flight was from the engine's figure, over the canaries
    measured by both: client median minus engine median per canary (the client also counts what the engine
    queues, and what it has sent but the engine not yet received)."""

    canaries: int
    median_difference: float | None
    max_abs_difference: float | None


class CoResidency(TypedDict):
    source: CoResidencySource | None
    min: float | None  # whole numbers as int (``reports.analysis.coresidency.whole``)
    median: float | None
    max: float | None
    held: int
    not_held: int
    unmeasured: int
    not_held_at_send: int
    band: list[int]  # [low, high] of the level's band (loadgen.core.band) for an ordinary canary of the set
    at_level: int  # canaries whose median measured others lay in their level's band
    not_at_level: int  # canaries whose median lay outside it (overshoot, empty slots, an engine that queues)
    bound: LevelBoundName | None  # which side of the level its background erred on (record's level_bound)
    client: Spread | None  # the client's own count over the same canaries, whatever the source above
    client_vs_engine: ClientVsEngine | None  # where both the client's count and an engine figure exist


class Witness(TypedDict):
    """``run.witness``: which record the sweep's co-residency came from and how fresh it was
    (``reports.analysis.coresidency.witness``). The load side's own count at send (``held_at_send``) is never the
    witness: it is what the client believes, and a client that reads a stream late believes a finished request runs."""

    source: CoResidencySource | None  # what most measured sweep canaries used; None: none was measured
    canaries: int  # sweep canaries measured by it
    scrape_interval_s: float | None  # metrics: the scraper's interval
    gauge_changes: int | None  # metrics: changes of the running gauge seen while sweep canaries ran
    gauge_change_median_s: float | None  # metrics: the median time between two of those changes in one canary
    refresh_steps: int | None  # metrics: the engine's own refresh of its gauge, in steps, where it says it
    summary: str


class SidesCoResidency(TypedDict):
    """A prefill/decode run's co-residency per side (``reports.analysis.sides``): the prefill side over each canary's
    prefill window, the decode side over its decode life; the side its background leaves quiet promises 0."""

    prefill: CoResidency
    decode: CoResidency


class CoResidencyGroup(TypedDict):
    others: int
    canaries: int
    completions: int
    unique_completions: int
    diverged: int | None
    divergence_rate: float | None
    divergence_rate_ci95: list[float] | None
    earliest_divergence: int | None
    min: float | None
    max: float | None


SideName = Literal["prefill", "decode"]  # loadgen.core.servers.Side
SidesOutcome = Literal["prefill", "decode", "both", "neither", "too few canaries"]  # reports.analysis.side_rule


class SideGroup(TypedDict):
    others: int
    completions: int
    diverged: int


class SideContrast(TypedDict):
    """One side's lowest and highest load groups and what the rule made of them (``reports.analysis.side_rule``)."""

    verdict: Literal["follows", "no", "flat", "too_few", "unmeasured"]
    low: SideGroup | None
    high: SideGroup | None


class SideFollows(TypedDict):
    """Which side's load the divergence follows (``reports.analysis.side_rule.follows``)."""

    outcome: SidesOutcome
    sentence: str
    prefill: SideContrast
    decode: SideContrast


class SidesHeatmap(TypedDict):
    """Sweep completions by prefill-side load (rows) and decode-side load (columns)
    (``reports.analysis.sides.heatmap``)."""

    prefill_others: list[int]
    decode_others: list[int]
    completions: list[list[int]]
    diverged: list[list[int]]
    rate: list[list[float | None]]  # None: no completion in the cell


class Sides(TypedDict):
    """A prefill/decode run's divergence by each side's measured load (``reports.analysis.canary.sides_section``)."""

    loaded: SideName  # the side the background loads: its co-residency is the canary's ``co_residency``
    prefill_window_unknown: int  # sweep canaries not streamed: no first token, both windows their whole life
    prefill: list[CoResidencyGroup] | None  # by prefill-side others; None: unmeasured there
    decode: list[CoResidencyGroup] | None
    heatmap: SidesHeatmap | None
    follows: SideFollows | None  # None: no reference
