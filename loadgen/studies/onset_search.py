"""The onset search, pure: which background level to try next, given what the levels tried so far showed.

Why: a full sweep spends the same canaries on every level, most of them far from where the answer
changes. The onset is the lowest level at which the canary diverges from its reference; if divergence
is monotone in the level (diverging at L means diverging at every level above L), it is found by
doubling from 1 (1, 2, 4, ... capped at ``max_level``) until a level diverges, then bisecting between
the highest clean level and the lowest divergent one until they are adjacent. That tries at most about
2 log2(max_level) + 1 levels, and after the doubling only levels inside the undecided interval.

Level 0 (the canary alone) is the baseline, clean by definition (the reference is made there), and is
never tried. The functions take every result so far (level -> diverged) and derive the state from
it, so the search can be replayed from any record of its steps; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

Results = Mapping[int, bool]  # level tried -> True if it diverged, False if it was clean


@dataclass(frozen=True)
class Bracket:
    """What the results decide: the highest clean level below the lowest divergent one (0: only the
    baseline) and that divergent level (None: none diverged)."""

    highest_clean: int
    lowest_divergent: int | None


def check_max_level(max_level: int) -> None:
    if max_level < 1:
        raise ValueError(f"max_level must be at least 1, got {max_level}")


def bracket(results: Results) -> Bracket:
    """The bracket the results give: the lowest divergent level, and the highest clean level below it
    (or, when none diverged, the highest clean level tried)."""
    divergent = [level for level, diverged in results.items() if diverged]
    low = min(divergent) if divergent else None
    clean = [level for level, diverged in results.items() if not diverged and (low is None or level < low)]
    return Bracket(max(clean, default=0), low)


def next_level(max_level: int, results: Results) -> int | None:
    """The next level to try, or None when the results decide the onset (or that there is none up to
    ``max_level``). Doubling while every level tried is clean, then bisection inside the bracket."""
    check_max_level(max_level)
    b = bracket(results)
    if b.lowest_divergent is None:
        if b.highest_clean >= max_level:
            return None
        return max(1, min(2 * b.highest_clean, max_level))
    if b.lowest_divergent - b.highest_clean <= 1:
        return None
    return (b.highest_clean + b.lowest_divergent) // 2


def search(max_level: int, diverges: Callable[[int], bool]) -> dict[int, bool]:
    """Run the whole search against an oracle (level -> diverged); the results, in the order tried.
    For tests and dry runs: the driver (``loadgen.studies.onset``) makes each step a real run."""
    results: dict[int, bool] = {}
    while (level := next_level(max_level, results)) is not None:
        results[level] = diverges(level)
    return results
