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

The levels in the results are **measured**, not asked (docs/design.md, "The level's band"): an endpoint need
not hold the level the background asks for (a floor runs a hand-over's extra request, a ceiling a slot's gap,
an engine queues, a background fails), so each canary is placed at the level it was measured at (its median
other requests over its life, rounded: ``report.json``'s ``by_co_residency``) and a measured level is divergent
when any canary measured there diverged. ``next_step`` asks for the measured level the bracket needs; when
that level was asked already and did not come out there, asking again would measure the same, so the search
stops undecided and says what was measured. Divergence measured beside no other request stops it too: the
baseline, alone, is the reference.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

Results = Mapping[int, bool]  # level (measured) -> True if it diverged, False if it was clean
Asked = Mapping[int, Collection[int]]  # level asked -> the measured levels of its canaries


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


@dataclass(frozen=True)
class Step:
    """What the search does next: ask ``level``, or end (``level`` None): decided, or undecided with ``stopped``
    saying why."""

    level: int | None
    stopped: str | None = None


def next_step(max_level: int, results: Results, asked: Asked) -> Step:
    """The next level to ask, from the results by measured level and the levels asked so far (with what their
    canaries measured): the level ``next_level`` needs, unless that level was asked already (the endpoint did not
    hold it: asking again would measure the same) or a canary measured beside no other request diverged."""
    if results.get(0):
        return Step(
            None, "a canary measured beside no other request diverged: the endpoint disagrees with itself alone"
        )
    target = next_level(max_level, results)
    if target is None:
        return Step(None)
    target = min(target, max_level)  # a divergence measured above max_level bisects towards it, asks no higher
    if target in asked:
        seen = ", ".join(str(m) for m in sorted(set(asked[target]))) or "nothing (no canary was measured)"
        return Step(
            None,
            f"the search needs a canary measured beside {target} other requests; level {target} was asked and its "
            f"canaries were measured beside {seen}: the endpoint does not hold that level",
        )
    return Step(target)


def merge(results: Results, measured: Iterable[tuple[int, bool]]) -> dict[int, bool]:
    """``results`` with more canaries, each (measured level, diverged): a measured level is divergent when any
    canary measured there diverged."""
    out = dict(results)
    for level, diverged in measured:
        out[level] = out.get(level, False) or diverged
    return out


def search_measured(
    max_level: int, ask: Callable[[int], Iterable[tuple[int, bool]]]
) -> tuple[dict[int, bool], dict[int, list[int]], str | None]:
    """Run the whole search against an endpoint oracle (level asked -> each canary's measured level and whether
    it diverged): the results by measured level, the levels asked (with what they measured), in order, and why
    it stopped undecided (None: decided). For tests and dry runs, as ``search``."""
    results: dict[int, bool] = {}
    asked: dict[int, list[int]] = {}
    while (step := next_step(max_level, results, asked)).level is not None:
        canaries = list(ask(step.level))
        asked[step.level] = [m for m, _ in canaries]
        results = merge(results, canaries)
    return results, asked, step.stopped


def search(max_level: int, diverges: Callable[[int], bool]) -> dict[int, bool]:
    """Run the whole search against an oracle (level -> diverged); the results, in the order tried.
    For tests and dry runs: the driver (``loadgen.studies.onset``) makes each step a real run."""
    results: dict[int, bool] = {}
    while (level := next_level(max_level, results)) is not None:
        results[level] = diverges(level)
    return results
