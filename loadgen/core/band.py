"""The level's band: how many other requests a canary may be measured to share the engine with and still count
as "at its level".

Why: a level is a promise (docs/design.md, "The level's band"). Background slots hand over from one request to
the next, so at any instant a slot may be doubled for a few steps (a floor: the successor is sent before the
predecessor ends) or empty for a few milliseconds (a ceiling: the successor is sent once the predecessor has
ended). Those moments are expected; what must be caught is a canary that spent its life far from its level: an
overshoot (a slot doubled for most of a request), an empty slot (background refused or never sent), an engine
that queues what the level sends. So the test is on the **median** of what a canary measured over its life
(robust to moments), against a band around the promise that widens with the level:
``[L - floor(L / 4), L + ceil(L / 4)]``, e.g. 1 -> [1, 2], 3 -> [3, 4], 12 -> [9, 15], 48 -> [36, 60].
Level 0 (warm-up, baseline) promises exactly 0.

One rule for the report, ``loadgen onset``, the benchmarks and the tests. Pure: integers in, integers out, and
``time_in_band``: a life's seconds beside each count of other requests in, its shares below, in and above the band
out (a server's own count over a canary's life, as the test servers and ``benchmarks/level_fidelity.py`` read it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

# which side of its level a slot errs on (docs/design.md, "The level's band"): a floor hands over before the
# end (a slot is doubled for a moment), a ceiling once the end is seen (a slot is empty for a moment)
LevelBound = Literal["floor", "ceiling"]
FLOOR: Final = "floor"
CEILING: Final = "ceiling"


def level_band(expected_others: int) -> tuple[int, int]:
    """The band ``(low, high)``, both included, of measured other requests that counts as at the level."""
    level = max(int(expected_others), 0)
    return level - level // 4, level + math.ceil(level / 4)


def at_level(median_others: float, expected_others: int) -> bool:
    """A canary's median measured other requests lies in its level's band."""
    low, high = level_band(expected_others)
    return low <= median_others <= high


@dataclass(frozen=True)
class TimeInBand:
    """Shares of a canary's life (0..1, summing to 1) spent below, within and above its level's band."""

    below: float
    within: float
    above: float


def time_in_band(seconds_by_others: Mapping[int, float], expected_others: int) -> TimeInBand | None:
    """Where a life was spent against the band, from the seconds it spent beside each count of other requests;
    None for a life of no length. Why shares of time, beside the median: a floor may leave the band's top for a
    moment (several slots handing over at once) without moving the median, and how long it stayed out is the
    figure that says whether the level was what it promised."""
    low, high = level_band(expected_others)
    total = sum(seconds_by_others.values())
    if total <= 0:
        return None
    below = sum(s for k, s in seconds_by_others.items() if k < low) / total
    above = sum(s for k, s in seconds_by_others.items() if k > high) / total
    return TimeInBand(below=below, within=max(1.0 - below - above, 0.0), above=above)
