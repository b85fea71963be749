"""Measured co-residency: how many other requests shared the engine with each canary, and whether
that held the promise its level made.

docs/design.md ("held"): a level promises ``expected_others`` other requests beside the canary
(``level`` for an ordinary canary, ``level - 1`` for a burst copy, whose level counts the copies in
flight itself included, 0 for warm-up and baseline). What the canary got is measured over its whole
lifetime, never at one instant: the engine's own batch sizes where the record carries them
(``batch_others_*``, the truth), else the running gauge of every ``/metrics`` sample taken while it
was in flight (``engine_others_*``, joined here at report time). ``level_held`` is measured min >=
expected; unknown (NaN) where nothing was measured.

Pure: frames and arrays in, arrays and JSON-ready dicts out. Columns a run folder predates are
treated as missing (NaN, null), never as 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.coresidency import window_running
from collectors.runfolder import BATCH_OTHERS
from loadgen.core.manifest import EngineMetricsSummary
from loadgen.core.stats import median, num
from reports.model import CoResidency, CoResidencySource, Witness

Floats = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]
ENGINE_OTHERS = ("engine_others_min", "engine_others_median", "engine_others_max")
NONE, TRUTH, METRICS = 0, 1, 2  # where a canary's measured co-residency came from
SOURCE_NAMES: dict[int, CoResidencySource] = {TRUTH: "engine_batch_sizes", METRICS: "metrics"}


def _floats(frame: Any, name: str, rows: npt.NDArray[np.int64] | None = None) -> Floats:
    """A column as float64 (a nullable boolean as 1.0 / 0.0 / NaN); all NaN where the frame lacks it."""
    if name not in frame:
        return np.full(len(frame) if rows is None else len(rows), np.nan)
    col = frame[name]
    if str(col.dtype) == "boolean":
        values: Floats = col.to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        values = np.asarray(col.to_numpy(), dtype=np.float64)
    return values if rows is None else values[rows]


def join_engine(frame: Any, engine_t: Floats | None, engine_running: Floats | None, edge_s: float = 0.05) -> Any:
    """``frame`` plus the window join of the engine's running gauge over each canary's lifetime:
    ``engine_others_min/median/max`` (gauge - 1, the canary itself; never below 0), ``engine_samples``
    (how many samples), and ``engine_running`` replaced by the median gauge over the lifetime where a
    sample exists (the record's own value, if any, else). Without samples the frame comes back with
    those columns NaN / 0.

    The window is the part of the lifetime where the engine surely ran the canary: from its first
    token (streamed), else one scrape interval (``edge_s``) after it was sent, to one interval before
    its last byte. At either edge a sample can miss the canary itself (not yet admitted, or already
    finished while its last bytes travel), and "gauge - 1" would then count one request too few."""
    n = len(frame)
    if engine_t is None or engine_running is None or n == 0:
        nan = np.full(n, np.nan)
        return frame.assign(**{k: nan for k in ENGINE_OTHERS}, engine_samples=np.zeros(n, np.int64))
    sent = frame["sent_at"].to_numpy(dtype=np.float64)
    ttft = frame["ttft_s"].to_numpy(dtype=np.float64)
    start = sent + np.where(np.isnan(ttft), edge_s, np.maximum(ttft, 0.0))
    end = sent + frame["latency_s"].to_numpy(dtype=np.float64) - edge_s
    lo, med, hi, count = window_running(start, end, engine_t, engine_running)
    own = frame["engine_running"].to_numpy(dtype=np.float64)
    return frame.assign(
        engine_others_min=np.maximum(lo - 1.0, 0.0),
        engine_others_median=np.maximum(med - 1.0, 0.0),
        engine_others_max=np.maximum(hi - 1.0, 0.0),
        engine_samples=count,
        engine_running=np.where(count > 0, med, own),
    )


@dataclass
class Measured:
    """Per row: measured co-residency (truth where present, else scraped), its source, the promise
    and whether it held (1.0 / 0.0 / NaN unknown), and the load side's own check at send."""

    lo: Floats
    med: Floats
    hi: Floats
    source: npt.NDArray[np.int8]
    expected: npt.NDArray[np.int64]
    held: Floats
    held_at_send: Floats

    @property
    def known(self) -> Mask:
        out: Mask = self.source != NONE
        return out


def expected_others(level: npt.NDArray[np.integer[Any]], phase: npt.NDArray[Any], burst: Mask) -> Any:
    """What a level promises: ``level`` other requests, ``level - 1`` for a burst copy, 0 outside the sweep."""
    lv = np.asarray(level, dtype=np.int64)
    exp = np.where(burst, lv - 1, lv)
    return np.where(np.asarray(phase) == "sweep", np.maximum(exp, 0), 0)


def measure(
    frame: Any,
    rows: npt.NDArray[np.int64] | None = None,
    *,
    scraped_columns: tuple[str, str, str] = ENGINE_OTHERS,
    promised: bool = True,
) -> Measured:
    """``Measured`` for ``rows`` of ``frame`` (all rows when None); columns it lacks count as missing.
    ``scraped_columns``: another scraped figure (a prefill/decode side's, ``reports.sides.OTHERS``), without
    batch sizes; ``promised`` False: the level promises nothing there (the side the background leaves quiet)."""
    idx = np.arange(len(frame), dtype=np.int64) if rows is None else rows
    nan = np.full(len(idx), np.nan)
    truth = [_floats(frame, k, idx) if scraped_columns == ENGINE_OTHERS else nan for k in BATCH_OTHERS]
    scraped = [_floats(frame, k, idx) for k in scraped_columns]
    has_truth = ~np.isnan(truth[0])
    has_scraped = ~np.isnan(scraped[0])
    lo, med, hi = (np.where(has_truth, t, s) for t, s in zip(truth, scraped, strict=True))
    source = np.where(has_truth, TRUTH, np.where(has_scraped, METRICS, NONE)).astype(np.int8)
    burst = frame["burst"].to_numpy(dtype=bool)[idx] if "burst" in frame else np.zeros(len(idx), bool)
    expected = expected_others(frame["level"].to_numpy()[idx], frame["phase"].to_numpy()[idx], burst)
    if not promised:
        expected = np.zeros_like(expected)
    with np.errstate(invalid="ignore"):
        held = np.where(np.isnan(lo), np.nan, (lo >= expected).astype(np.float64))
    return Measured(lo, med, hi, source, expected, held, _floats(frame, "held_at_send", idx))


def whole(x: Any) -> float | int | None:
    """A count as a JSON number: an int when it is whole (gauges arrive as floats), None for NaN."""
    v = num(x)
    return int(v) if isinstance(v, float) and v.is_integer() else v


def level_block(m: Measured, sel: Mask) -> CoResidency:
    """``co_residency`` of one level (or any set of canaries): what they were measured to share."""
    known = sel & m.known
    src = m.source[known]
    source = SOURCE_NAMES[TRUTH] if (src == TRUTH).any() else SOURCE_NAMES[METRICS] if src.size else None
    return {
        "source": source,
        "min": whole(m.lo[known].min()) if known.any() else None,
        "median": median(m.med[known]),
        "max": whole(m.hi[known].max()) if known.any() else None,
        "held": int((sel & (m.held == 1.0)).sum()),
        "not_held": int((sel & (m.held == 0.0)).sum()),
        "unmeasured": int((sel & ~m.known).sum()),
        "not_held_at_send": int((sel & (m.held_at_send == 0.0)).sum()),
    }


def others_group(m: Measured, sweep: Mask) -> tuple[Mask, npt.NDArray[np.int64]]:
    """Measured sweep rows and each row's group: its median co-residency rounded to an integer
    (halves to even); -1 where unmeasured."""
    known = sweep & m.known
    group = np.full(len(known), -1, np.int64)
    group[known] = np.rint(m.med[known]).astype(np.int64)
    return known, group


def _levels_counts(levels: npt.NDArray[np.int64]) -> str:
    lv, n = np.unique(levels, return_counts=True)
    return ", ".join(f"level {a}: {b}" for a, b in zip(lv.tolist(), n.tolist(), strict=True))


def notices(frame: Any, m: Measured, has_samples: bool, engine_summary: EngineMetricsSummary | None) -> list[str]:
    """Run notices that make gaps in the measured x-axis visible (sweep canaries only).

    ``m`` covers every row of ``frame``; ``has_samples``: the run holds ``/metrics`` samples."""
    out: list[str] = []
    sweep = frame["phase"].to_numpy() == "sweep"
    level = frame["level"].to_numpy().astype(np.int64)
    missing = sweep & ~m.known
    if has_samples and missing.any():
        rows = np.flatnonzero(missing)
        order = np.lexsort((frame["request_id"].to_numpy()[rows].astype(str), frame["sent_at"].to_numpy()[rows]))
        first = ", ".join(str(r) for r in frame["request_id"].to_numpy()[rows[order[:5]]])
        more = ", …" if len(rows) > 5 else ""
        out.append(
            f"{len(rows)} canar{'y' if len(rows) == 1 else 'ies'} had no engine figure although the endpoint "
            f"serves /metrics (no sample while in flight, and no engine batch sizes): {_levels_counts(level[rows])} "
            f"(request ids {first}{more})."
        )
    short = sweep & (m.held == 0.0)
    if short.any():
        k = int(short.sum())
        out.append(
            f"{k} canar{'y' if k == 1 else 'ies'} shared the engine with fewer other requests than the level "
            f"promised at some point of {'its' if k == 1 else 'their'} life (measured minimum below the level): "
            f"{_levels_counts(level[short])}."
        )
    gap = (engine_summary or {}).get("max_gap_s")
    if isinstance(gap, int | float) and gap > 1.0:
        gaps = (engine_summary or {}).get("gaps")
        counted = f" ({gaps} gap{'' if gaps == 1 else 's'} in all)" if isinstance(gaps, int) else ""
        out.append(
            f"The /metrics scraper went {gap:.1f} s without a sample{counted}: canaries in flight then have no "
            "scraped engine figure."
        )
    return out


def gauge_changes(
    start: Floats, end: Floats, engine_t: Floats | None, engine_running: Floats | None
) -> tuple[int, float | None]:
    """How often the running gauge moved inside the windows ``[start, end]``: the number of changes between
    two samples of one window, and the median time between two changes of one window (None under two).
    Vectorised over the windows (a million canaries' windows are one pass, not a Python loop)."""
    if engine_t is None or engine_running is None or not len(start):
        return 0, None
    keep = np.isfinite(engine_running)
    t, v = engine_t[keep], engine_running[keep]
    moved = np.flatnonzero(v[1:] != v[:-1]) + 1  # sample j differs from sample j - 1
    lo = np.searchsorted(t, start, side="left")  # a window's samples are lo .. hi - 1
    hi = np.searchsorted(t, end, side="left")
    first = np.searchsorted(moved, lo + 1, side="left")  # changes whose both samples lie in the window
    last = np.searchsorted(moved, hi, side="left")
    count = np.maximum(last - first, 0)
    pairs = np.maximum(count - 1, 0)  # consecutive changes of one window: moved[k], moved[k + 1]
    if not pairs.sum():
        return int(count.sum()), None
    k = np.repeat(first - np.cumsum(pairs) + pairs, pairs) + np.arange(int(pairs.sum()))
    return int(count.sum()), float(np.median(t[moved[k + 1]] - t[moved[k]]))


def witness(
    frame: Any,
    m: Measured,
    engine_t: Floats | None,
    engine_running: Floats | None,
    *,
    scrape_interval_s: float | None,
    refresh_steps: int | None,
) -> Witness:
    """Which record measured the sweep canaries' co-residency and how fresh it was, with one sentence.

    A running gauge is only as fresh as its engine keeps it: SGLang sets it at each prefill and every
    ``decode_log_interval`` decode steps (40 by default), so a sample can be that many steps old; how often it
    was seen to move while canaries ran says the same from the samples themselves."""
    sweep = frame["phase"].to_numpy() == "sweep"
    truth = int((sweep & (m.source == TRUTH)).sum())
    scraped = int((sweep & (m.source == METRICS)).sum())
    if truth >= scraped and truth:
        return {
            "source": SOURCE_NAMES[TRUTH],
            "canaries": truth,
            "scrape_interval_s": None,
            "gauge_changes": None,
            "gauge_change_median_s": None,
            "refresh_steps": None,
            "summary": f"co-residency from the engine's own batch size at every step of {truth} sweep canaries (exact)",
        }
    if not scraped:
        return {
            "source": None,
            "canaries": 0,
            "scrape_interval_s": scrape_interval_s,
            "gauge_changes": None,
            "gauge_change_median_s": None,
            "refresh_steps": refresh_steps,
            "summary": "no sweep canary's co-residency was measured",
        }
    rows = sweep & (m.source == METRICS)
    sent = frame["sent_at"].to_numpy(dtype=np.float64)[rows]
    end = sent + frame["latency_s"].to_numpy(dtype=np.float64)[rows]
    changes, gap = gauge_changes(sent, end, engine_t, engine_running)
    every = f" every {scrape_interval_s * 1000:.0f} ms" if scrape_interval_s else ""
    said = f"co-residency from the engine's running gauge (/metrics{every}) over {scraped} sweep canaries"
    moved = f"; it moved {changes} times while they ran" + (f", a median {gap:.2f} s apart" if gap is not None else "")
    fresh = (
        f"; the server refreshes it every {refresh_steps} steps (and at each prefill), so a sample can be that old"
        if refresh_steps and refresh_steps > 1
        else ""
    )
    return {
        "source": SOURCE_NAMES[METRICS],
        "canaries": scraped,
        "scrape_interval_s": scrape_interval_s,
        "gauge_changes": changes,
        "gauge_change_median_s": gap,
        "refresh_steps": refresh_steps,
        "summary": said + moved + fresh,
    }
