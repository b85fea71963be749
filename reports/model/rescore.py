"""The ``rescore`` section of ``report.json``: the re-score check, per canary and level, alone and at level.

Pure types (``reports.analysis.rescore`` fills them; docs/design.md, "The re-score check"). ``mismatch`` is a
count of completions whose re-scored logprobs were not bitwise the decode's at every output position, of those
re-scored, with its 95% Wilson interval; a side with nothing re-scored is "unmeasured" (``unmeasured`` says why,
by fault kind), never 0.
"""

from __future__ import annotations

from typing import TypedDict

from reports.model.seeds import Rate


class Spread(TypedDict):
    min: float | None
    median: float | None
    max: float | None


class RescoreSide(TypedDict):
    """One way of re-scoring (``alone`` or ``at_level``) the completions of one level."""

    completions: int  # the level's completions of a canary that asked for a re-score
    rescored: int  # those with a usable re-score
    bitwise_equal: int  # of those, equal at every output position
    mismatch: Rate  # k: not bitwise equal, n: rescored
    first_mismatch: Spread | None  # 0-based output position of the first unequal logprob, over mismatched ones
    max_abs_delta: float | None  # the largest |re-score - decode| logprob at any output position
    topk_tv: Spread | None  # per completion its largest top-k distance over positions (TOPK_DISTANCE)
    unmeasured: dict[str, int]  # completions without a usable re-score, by fault or error kind
    note: str | None  # "unmeasured: <why>" where nothing was re-scored, else None


class RescoreLevel(TypedDict):
    phase: str  # "baseline" or "sweep"
    concurrency: int
    alone: RescoreSide
    at_level: RescoreSide


class RescoreCanary(TypedDict):
    canary: str
    levels: list[RescoreLevel]


class RescoreCheck(TypedDict):
    topk_distance: str  # what ``topk_tv`` measures, in words
    canaries: list[RescoreCanary]
    records: int
    files: list[str]
    notices: list[str]
