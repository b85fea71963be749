"""The CI gate's thresholds as ``loadgen check`` takes them: option names, ranges, the default error rate, parsing.

Why here and not beside the gate (``reports.analysis.check``): the command's parser is built from this
vocabulary, and building it (``loadgen --help``) must not load the report stack. Pure: strings in,
``Threshold`` or a ``UsageError`` naming the option out; judging a report against thresholds is the gate's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from loadgen.core.errors import UsageError

Gated = Literal["unique_completions", "divergence_rate", "earliest_divergence", "errors"]  # the figures gated on
# option name -> (figure key in report.json, "max" or "min")
METRICS: dict[str, tuple[Gated, Literal["max", "min"]]] = {
    "max_unique": ("unique_completions", "max"),
    "max_divergence_rate": ("divergence_rate", "max"),
    "min_earliest_divergence": ("earliest_divergence", "min"),
    "max_errors": ("errors", "max"),
}
# the seed contracts (report.json ``seed_contracts``, reports.analysis.seed_check): option name -> the section
# whose rates it bounds, each a share of that section's completions (issue 55)
SeedSection = Literal["same_seed", "seeds", "choices", "routes"]
SEED_METRICS: dict[str, SeedSection] = {
    "max_seed_mismatch": "same_seed",  # same seed, other tokens than its seeded baseline
    "max_seed_collision": "seeds",  # different seeds, the same completion ("seed ignored" at 1)
    "max_duplicate_choices": "choices",  # n > 1: a choice repeating an earlier one of its request
    "max_route_mismatch": "routes",  # one seed, other tokens on another route
}
# the re-score check (report.json ``rescore``, reports.analysis.rescore_gate): the share of re-scored completions
# whose logprobs were not bitwise the decode's, alone and at level, each judged
RESCORE_METRICS = ("max_rescore_mismatch",)
EVERY_LEVEL = "each"
# what each threshold may be: a share within 0..1, or a count or position of at least 0
RANGES = {
    "max_unique": (0.0, None),
    "max_divergence_rate": (0.0, 1.0),
    "min_earliest_divergence": (0.0, None),
    "max_errors": (0.0, None),
    "max_error_rate": (0.0, 1.0),
    **{metric: (0.0, 1.0) for metric in [*SEED_METRICS, *RESCORE_METRICS]},
}
DEFAULT_MAX_ERROR_RATE = 0.05


def limit_of(metric: str, value: str, spec: str | None = None) -> float:
    """``value`` as the limit of ``metric``; a ``UsageError`` naming the option when it is not a number
    within the metric's range (a rate of 5, a negative count, NaN)."""
    option = "--" + metric.replace("_", "-")
    shown = spec if spec is not None else value
    try:
        limit = float(value)
    except ValueError as exc:
        raise UsageError(f"{option} {shown!r}: expected a number, optionally @LEVEL or @each") from exc
    lo, hi = RANGES[metric]
    if not (limit >= lo and (hi is None or limit <= hi)) or limit == float("inf"):
        want = f"between {lo:g} and {hi:g}" if hi is not None else f"a finite number of at least {lo:g}"
        raise UsageError(f"{option} {shown!r}: expected {want}")
    return limit


@dataclass(frozen=True)
class Threshold:
    metric: str  # a key of METRICS
    limit: float
    level: int | str | None = None  # None: overall; an int: that level; "each": every level

    @classmethod
    def parse(cls, metric: str, spec: str) -> Threshold:
        """``VALUE`` (overall), ``VALUE@LEVEL`` or ``VALUE@each``; errors name the option."""
        option = "--" + metric.replace("_", "-")
        value, _, where = spec.partition("@")
        limit = limit_of(metric, value, spec)
        if not where:
            return cls(metric, limit)
        if where == EVERY_LEVEL:
            return cls(metric, limit, EVERY_LEVEL)
        try:
            level = int(where)
        except ValueError as exc:
            raise UsageError(f"{option} {spec!r}: the level after @ must be an integer or 'each'") from exc
        if level < 0:
            raise UsageError(f"{option} {spec!r}: the level after @ must be 0 or more")
        return cls(metric, limit, level)
