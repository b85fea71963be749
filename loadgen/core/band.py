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

One rule for the report, ``loadgen onset``, the benchmarks and the tests. Pure: integers in, integers out.
"""

from __future__ import annotations

import math
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
