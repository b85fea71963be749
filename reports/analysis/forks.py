"""Fork classification: at a first divergence, was the reference's choice a near-tie that the logits' own
rounding could flip, or did a clear winner change (a structural divergence)?

The test: the reference's top-1 − top-2 logprob gap at the fork position, measured in units of the
logits' rounding step at that magnitude. A gap of at most ``NEAR_TIE_STEPS`` steps is a **near-tie
flip**; a larger one is **structural**; a fork with no usable gap is **unclassified** (fewer than two
``top_logprobs`` alternatives there, a non-finite logprob, the reference already ended, or text
identity, whose positions are characters).

The step, from logprobs alone. A logit ``z`` rounded to bf16 keeps 8 significant bits, so its
rounding step is ``LOGIT_RELATIVE_STEP`` = 2^-8 of its magnitude. Only logprobs are recorded:
``l_i = z_i − log Σ exp z``, the logits shifted by an unknown constant, so a gap ``l_1 − l_2`` is the
logit gap exactly, but no logit's own magnitude can be recovered. The magnitude is estimated as that
of the runner-up's logprob, ``|l_2| = |l_1| + gap`` (``l_1``: the reference's chosen-token logprob at
the position, its top-1 at temperature 0; ``gap``: its recorded top-1 − top-2 gap), so

    step = LOGIT_RELATIVE_STEP × (|l_1| + gap),   gap_steps = gap / step,
    near-tie  ⇔  gap_steps ≤ NEAR_TIE_STEPS.

Since ``p_1 + p_2 ≤ 1``, ``|l_2| ≥ ln 2``: the step is never zero. The estimate is a proxy, not a
bound: where a model's logits sit far from its log-partition (large positive logits, or a unigram
prior well below zero as in the embedded engine) it is smaller than the true magnitude, so some flips
counted structural were within a few true steps; a fork counted near-tie was within ``NEAR_TIE_STEPS``
estimated steps. ``report.json`` keeps each fork's ``gap_steps`` and ``rounding_step`` so a reader can
re-draw the line.

Pure: arrays in, JSON-ready values out.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from reports.model.report import ForkClass, ForkClasses, ForkMethod, GapBin

LOGIT_RELATIVE_STEP = 2.0**-8  # bf16: 8 significant bits, the step relative to the logit's magnitude
NEAR_TIE_STEPS = 4.0  # a gap of at most this many estimated rounding steps is a near-tie flip
CLASSES: tuple[ForkClass, ForkClass, ForkClass] = ("near_tie", "structural", "unclassified")
NEAR_TIE, STRUCTURAL, UNCLASSIFIED = 0, 1, 2
# gap_steps histogram edges: [0, 1), [1, 2), [2, 4), ... [256, ∞)
GAP_EDGES = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)
ESTIMATE = "|l1| + gap: the runner-up's logprob magnitude, l1 the reference's chosen-token logprob"

F64 = npt.NDArray[np.float64]


def rounding_step(top1: npt.ArrayLike, gap: npt.ArrayLike) -> F64:
    """The estimated rounding step of the logits at each position: ``LOGIT_RELATIVE_STEP × (|l_1| + gap)``;
    NaN where either is missing, non-finite or the gap is negative."""
    l1 = np.asarray(top1, dtype=np.float64)
    g = np.asarray(gap, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        step = LOGIT_RELATIVE_STEP * (np.abs(l1) + g)
        bad = ~(np.isfinite(step) & np.isfinite(g) & (g >= 0) & (step > 0))
    return np.where(bad, np.nan, step)


def classify(top1: npt.ArrayLike, gap: npt.ArrayLike) -> tuple[npt.NDArray[np.int8], F64, F64]:
    """Per fork: its class code (``NEAR_TIE``, ``STRUCTURAL``, ``UNCLASSIFIED``), the estimated step, and
    the gap in steps (NaN when unclassified)."""
    step = rounding_step(top1, gap)
    g = np.asarray(gap, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        steps = g / step
    ok = np.isfinite(steps)
    codes = np.full(step.shape, UNCLASSIFIED, dtype=np.int8)
    codes[ok & (steps <= NEAR_TIE_STEPS)] = NEAR_TIE
    codes[ok & (steps > NEAR_TIE_STEPS)] = STRUCTURAL
    return codes, step, np.where(ok, steps, np.nan)


def counts(codes: npt.NDArray[np.int8]) -> ForkClasses:
    """How many forks fell in each class; they add up to ``len(codes)``."""
    n = np.bincount(np.asarray(codes, dtype=np.int64), minlength=len(CLASSES))
    return {"near_tie": int(n[NEAR_TIE]), "structural": int(n[STRUCTURAL]), "unclassified": int(n[UNCLASSIFIED])}


def gap_histogram(gap_steps: npt.ArrayLike) -> list[GapBin]:
    """The distribution of gaps in rounding steps over ``GAP_EDGES`` (the last bin open-ended):
    ``[{"lo", "hi" (null for the last), "count"}]``. Non-finite values are left out."""
    v = np.asarray(gap_steps, dtype=np.float64)
    v = v[np.isfinite(v) & (v >= 0)]
    idx = np.searchsorted(np.asarray(GAP_EDGES), v, side="right") - 1
    n = np.bincount(idx, minlength=len(GAP_EDGES))
    return [
        {"lo": lo, "hi": GAP_EDGES[i + 1] if i + 1 < len(GAP_EDGES) else None, "count": int(n[i])}
        for i, lo in enumerate(GAP_EDGES)
    ]


def method() -> ForkMethod:
    """The constants and estimate the classification used, for ``report.json``."""
    return {"relative_step": LOGIT_RELATIVE_STEP, "near_tie_steps": NEAR_TIE_STEPS, "magnitude": ESTIMATE}


def label(code: int) -> ForkClass:
    return CLASSES[code] if 0 <= code < len(CLASSES) else "unclassified"
