"""Claims with a guarantee: "the divergence rate is below P, at 95% confidence".

Why: "no divergence in 10 canaries" says little; "rate < 5% at 95%" is a statement a reader can use.
The maths is the exact binomial. With ``k`` divergences in ``n`` completions the claim holds when a rate
of ``P`` would give ``k`` or fewer divergences with probability at most 5% (``P(X <= k | n, P) <= 0.05``),
which is the same as the exact one-sided Clopper-Pearson 95% upper bound of the rate being at most ``P``.
With no divergence that is ``(1 - P)^n <= 0.05``: the claim needs ``n >= ln(0.05) / ln(1 - P)``
canaries (``canaries_needed``; the rule of three, ``3 / P``, approximates it from above), and the upper
bound is ``1 - 0.05^(1/n)``.

Pure: numbers in, numbers and a JSON-ready dict out; ``validate_rate`` raises the CLI's ``UsageError``.
"""

from __future__ import annotations

import math
from typing import Literal, TypedDict

from loadgen.core.errors import UsageError

ALPHA = 0.05  # one-sided: the claim is made at 1 - ALPHA = 95% confidence
CONFIDENCE = 1.0 - ALPHA
DEFAULT_MAX_RATE = 0.05  # the P of the "a claim would need" line of a run made without --claim-max-rate
MAX_CLAIM_CANARIES = 5000  # per canary and level: a P needing more is refused (P >= about 0.0006)
OPTION = "--claim-max-rate"


def _none_le_alpha(n: int, p: float) -> bool:
    """``(1 - p)^n <= ALPHA``, computed as the binomial CDF at 0 is (``binom_cdf(0, n, p)``)."""
    return math.exp(n * math.log1p(-p)) <= ALPHA


def canaries_needed(p: float) -> int:
    """The fewest completions, all equal to the reference, that support "rate < ``p``" at 95%: the smallest
    ``n`` with ``(1 - p)^n <= 0.05``, i.e. ``ceil(ln(0.05) / ln(1 - p))`` (corrected for rounding)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    n = max(1, math.ceil(math.log(ALPHA) / math.log1p(-p)))
    while not _none_le_alpha(n, p):
        n += 1
    while n > 1 and _none_le_alpha(n - 1, p):
        n -= 1
    return n


def rule_of_three(p: float) -> int:
    """The rule-of-three approximation of ``canaries_needed``: ``ceil(3 / p)`` (never fewer)."""
    return math.ceil(3.0 / p)


def binom_cdf(k: int, n: int, p: float) -> float:
    """``P(X <= k)`` for ``X ~ Binomial(n, p)``. Summed from ``k`` along the smaller tail, each term from the
    one before (``lgamma`` once), until the terms no longer change the sum: a few hundred terms where the
    whole sum would be ``k`` (a million-record run has tens of thousands of divergences per level)."""
    if k < 0:
        return 0.0
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    lp, lq = math.log(p), math.log1p(-p)
    if k < n * p:  # the lower tail: terms fall from i = k down
        log_t = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lp + (n - k) * lq
        return min(1.0, math.exp(log_t) * _tail(k, n, (1.0 - p) / p, -1))
    # the upper tail, i > k: terms fall from i = k + 1 up
    j = k + 1
    log_t = math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * lp + (n - j) * lq
    return min(1.0, max(0.0, 1.0 - math.exp(log_t) * _tail(j, n, p / (1.0 - p), 1)))


def _tail(i: int, n: int, odds: float, step: int) -> float:
    """Binomial terms from ``i`` on, in ``step`` direction, relative to the term at ``i``: their sum."""
    total, t = 0.0, 1.0
    while 0 <= i <= n and t > total * 1e-17:
        total += t
        t *= (i / (n - i + 1) if step < 0 else (n - i) / (i + 1)) * odds
        i += step
    return total


def supports(diverged: int, completions: int, p: float) -> bool:
    """``diverged`` divergences in ``completions`` support "rate < ``p``" at 95%: ``P(X <= k | n, p) <= 0.05``."""
    if completions <= 0 or diverged >= completions:
        return False
    if diverged == 0:
        return _none_le_alpha(completions, p)
    return binom_cdf(diverged, completions, p) <= ALPHA


def upper_bound(diverged: int, completions: int) -> float | None:
    """The exact one-sided 95% (Clopper-Pearson) upper bound of the divergence rate; None without completions.
    ``1 - 0.05^(1/n)`` with no divergence; 1 when every completion diverged; else the ``u`` with
    ``P(X <= k | n, u) = 0.05``, found by bisection (the CDF falls as ``u`` rises)."""
    if completions <= 0:
        return None
    k, n = diverged, completions
    if k >= n:
        return 1.0
    if k == 0:
        return 1.0 - float(ALPHA ** (1.0 / n))
    lo, hi = k / n, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if binom_cdf(k, n, mid) > ALPHA:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13:
            break
    return hi


def validate_rate(value: str | float, option: str = OPTION) -> float:
    """``value`` as a claim's P: a number strictly between 0 and 1 whose claim needs at most
    ``MAX_CLAIM_CANARIES`` canaries per level; a ``UsageError`` naming ``option`` otherwise."""
    try:
        p = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{option} {value!r}: expected a rate strictly between 0 and 1, e.g. 0.05") from None
    if not 0.0 < p < 1.0:
        raise UsageError(f"{option} {value!r}: expected a rate strictly between 0 and 1, e.g. 0.05")
    n = canaries_needed(p)
    if n > MAX_CLAIM_CANARIES:
        raise UsageError(
            f"{option} {value!r}: the claim needs {n} canaries per level and canary (at most {MAX_CLAIM_CANARIES}); "
            f"ask for a rate of at least {min_rate():.2g}"
        )
    return p


def min_rate() -> float:
    """The smallest P whose claim fits in ``MAX_CLAIM_CANARIES`` canaries."""
    return 1.0 - float(ALPHA ** (1.0 / MAX_CLAIM_CANARIES))


ClaimStatus = Literal["holds", "impossible", "too_few", "unknown"]


class Claim(TypedDict):
    """``report.json``'s per-level ``claim`` (``level_claim``): does "rate < max_rate at 95%" hold at a level."""

    max_rate: float
    confidence: float
    asked: bool
    needed: int
    rule_of_three: int
    completions: int
    diverged: int | None
    upper_bound: float | None
    holds: bool
    status: ClaimStatus
    ended_early: bool


def level_claim(
    diverged: int | None,
    completions: int,
    p: float,
    *,
    asked: bool,
    planned: int | None,
    ended_early: bool = False,
) -> Claim:
    """``report.json``'s per-level ``claim``: does "rate < ``p`` at 95%" hold for these figures?

    ``status``: ``holds``; ``impossible`` (divergences that even ``planned`` clean completions could not
    outweigh, or the level was ended early by the claim rule after a divergence); ``too_few`` (no such
    divergence, but not enough completions); ``unknown`` (no reference to compare with)."""
    needed = canaries_needed(p)
    bound = upper_bound(diverged, completions) if diverged is not None else None
    holds = diverged is not None and supports(diverged, completions, p)
    status: ClaimStatus
    if diverged is None:
        status = "unknown"
    elif holds:
        status = "holds"
    elif diverged > 0 and (ended_early or not supports(diverged, max(completions, planned or 0), p)):
        status = "impossible"
    else:
        status = "too_few"
    return {
        "max_rate": p,
        "confidence": CONFIDENCE,
        "asked": asked,
        "needed": needed,
        "rule_of_three": rule_of_three(p),
        "completions": completions,
        "diverged": diverged,
        "upper_bound": bound,
        "holds": holds,
        "status": status,
        "ended_early": ended_early,
    }


def describe(claim: Claim) -> str:
    """One level's claim in words, for the reports and the gate: it opens with the report's word for the
    status (``status`` with ``_`` as a space: "holds", "impossible", "too few", "unknown")."""
    p, n, k = claim["max_rate"], claim["completions"], claim["diverged"]
    bound = claim.get("upper_bound")
    ub = f"95% upper bound {bound:.3g}" if isinstance(bound, int | float) else "no upper bound"
    early = " (level ended early by the claim rule)" if claim.get("ended_early") else ""
    status = claim["status"]
    if status == "unknown":
        return f"unknown: no reference to compare with{early}"
    seen = f"{k} of {n} diverged, {ub}{early}"
    if status == "holds":
        return f"holds: {seen} <= {p:g}"
    if status == "impossible":
        return f"impossible: {seen}"
    return f"too few: {seen}; {claim['needed']} clean completions needed"
