"""Cost beside determinism: what the background traffic got through, the canary's latency, and how
much the canary diverged, per level of a run, for ``compare`` and ``matrix``.

Background throughput of a level = the completion tokens of its successful background requests
(``usage.completion_tokens`` as recorded in ``background.jsonl``) over the level's wall time, the span
from its first background request's send to its last background request's end (``sent_at +
latency_s``, errors included: they occupied the level too). A request counts at the level it was
sent at. Null where no token count or no positive span exists (level 0 has no background). A run's
overall figure is all levels' tokens over the sum of their wall times.

Pure: arrays and report dicts in, JSON-ready values out.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from reports.model.comparison import CostRow
from reports.model.finite import finite
from reports.model.report import BackgroundLevel, Figures, Report, Throughput

_ON = {"1", "true", "on", "yes"}
_OFF = {"0", "false", "off", "no"}


def throughput(
    sent: npt.NDArray[np.float64], latency: npt.NDArray[np.float64], ok: npt.NDArray[np.bool_], tokens: Any
) -> Throughput:
    """``{"wall_s", "tokens_per_s"}`` of one level's background records (aligned arrays)."""
    sent = np.asarray(sent, dtype=np.float64)
    end = sent + np.asarray(latency, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        timed = np.isfinite(sent) & np.isfinite(end)
    wall = float(end[timed].max() - sent[timed].min()) if timed.any() else math.nan
    tok = np.asarray(tokens, dtype=np.float64)[np.asarray(ok, dtype=bool)]
    tok = tok[np.isfinite(tok)]
    total = float(tok.sum()) if tok.size else math.nan
    rate = total / wall if math.isfinite(wall) and wall > 0 and math.isfinite(total) else math.nan
    return {"wall_s": _num(wall), "tokens_per_s": _num(rate)}


def overall_throughput(background: list[BackgroundLevel] | None) -> float | None:
    """All levels' completion tokens over the sum of their wall times (report ``background`` entries)."""
    pairs = [
        (float(tokens), float(wall))
        for b in background or []
        if b.get("concurrency") is not None
        and finite(tokens := b.get("completion_tokens"))
        and finite(wall := b.get("wall_s"))
    ]
    wall = sum(w for _, w in pairs if w > 0)
    return _num(sum(t for t, w in pairs if w > 0) / wall) if wall > 0 else None


def batch_invariant(report: Report) -> bool | None:
    """Whether the run was batch-invariant: the server's own statement (``run.server_config.batch_invariant``),
    else a ``batch_invariant`` label (1/true/on/yes, 0/false/off/no); None when neither says."""
    run = report["run"]
    said = run.get("server_config", {}).get("batch_invariant")
    if isinstance(said, bool):
        return said
    label = str(run.get("labels", {}).get("batch_invariant", "")).strip().lower()
    return True if label in _ON else False if label in _OFF else None


def differ(flags: list[bool | None]) -> bool:
    """The runs differ in batch invariance: at least one is known on and one known off."""
    return True in flags and False in flags


def cost_row(report: Report, block: Figures | None, level: int | None) -> CostRow | None:
    """One run's cost and determinism figures at ``level`` (None: overall) for one canary's ``block``
    (a level entry, or ``overall``)."""
    if block is None:
        return None
    bg = report.get("background") or []
    if level is None:
        tps = overall_throughput(bg)
    else:
        tps = next((b.get("tokens_per_s") for b in bg if b.get("concurrency") == level), None)
    lat = block.get("latency_s")
    return {
        "background_tokens_per_s": tps if finite(tps) else None,
        "canary_latency_p50": None if lat is None else lat["p50"],
        "canary_latency_p99": None if lat is None else lat["p99"],
        "unique_completions": block.get("unique_completions"),
        "divergence_rate": block.get("divergence_rate"),
    }


def _num(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None
