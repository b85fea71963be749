"""The ``seed_contracts`` section of ``report.json``: what a seeded sampled request promises, checked at every level.

Pure types (``reports.analysis.seed_contracts`` fills them; docs/design.md, "Sampled canaries and the seed
contracts"). Each figure is a count ``k`` of ``n`` with its rate and 95% Wilson interval, at the baseline (each
canary alone), at every sweep level and over the sweep.
"""

from __future__ import annotations

from typing import TypedDict


class Rate(TypedDict):
    """``k`` of ``n`` at one scope: ``concurrency`` a sweep level, None for the baseline or the whole sweep."""

    concurrency: int | None
    n: int
    k: int
    rate: float | None
    ci95: list[float] | None


class SameSeed(TypedDict):
    """A sampled canary against its seeded baseline (the divergence figure, as a seed contract): ``k`` mismatched
    completions; each mismatch classed "logits_moved" (a chosen-token logprob moved before the fork) or
    "draw_only" (every logprob before it bitwise the baseline's: the draw alone changed), "unclassified" without
    logprobs."""

    canary: str
    seed: int | None
    levels: list[Rate]
    overall: Rate
    logits_moved: int
    draw_only: int
    unclassified: int


class SeedSet(TypedDict):
    """A canary's ``seeds`` on one route: ``k`` completions equal to a completion of another seed in the same
    scope. ``verdict``: "seed ignored" (every completion equal across seeds), "seeds collided" or "seeds honoured"."""

    family: str
    route: str
    seeds: list[int]
    baseline: Rate
    levels: list[Rate]
    overall: Rate
    verdict: str


class Choices(TypedDict):
    """A canary's ``n`` choices of one seed: ``k`` choices equal to an earlier choice of the same request."""

    canary: str
    n_choices: int
    baseline: Rate
    levels: list[Rate]
    overall: Rate
    verdict: str


class Routes(TypedDict):
    """One seed of a canary's ``routes``: ``k`` completions of the ``compared`` routes (all but the first) that
    differ from the first route's baseline reference; ``differing``: the routes with any such completion."""

    family: str
    seed: int | None
    routes: list[str]
    compared: list[str]
    baseline: Rate
    levels: list[Rate]
    overall: Rate
    differing: list[str]
    note: str


class SeedContracts(TypedDict):
    same_seed: list[SameSeed]
    seeds: list[SeedSet]
    choices: list[Choices]
    routes: list[Routes]
