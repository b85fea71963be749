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

Why this length: the joins, the per-canary measure, the level's band and the notices apply one definition of
the others beside a canary; split, the report's words about co-residency and the figures they describe would
live apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.read.coresidency import window_inflight, window_running
from collectors.read.runfolder import BATCH_OTHERS
from loadgen.core.band import level_band
from loadgen.core.manifest import EngineMetricsSummary
from loadgen.core.stats import median, num
from reports.model.coresidency import ClientVsEngine, CoResidency, CoResidencySource, LevelBoundName, Spread, Witness

Floats = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]
ENGINE_OTHERS = ("engine_others_min", "engine_others_median", "engine_others_max")
CLIENT_OTHERS = ("client_others_min", "client_others_median", "client_others_max")
TRACE_OTHERS = ("trace_others_min", "trace_others_median", "trace_others_max")
NONE, TRUTH, METRICS, CLIENT, TRACE = 0, 1, 2, 3, 4  # where a canary's measured co-residency came from
SOURCE_NAMES: dict[int, CoResidencySource] = {
    TRUTH: "engine_batch_sizes",
    TRACE: "engine_trace",
    METRICS: "metrics",
    CLIENT: "client",
}
EXACT = (TRUTH, TRACE)  # the engine's own steps: what the canary shared, step by step


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


def join_client(frame: Any, background: Any | None) -> Any:
    """``frame`` plus the client's own count of its requests in flight over each canary's life, itself left out:
    ``client_others_min/median/max`` (docs/design.md, "The level's band"). Every request the load processes sent
    counts: each background row (``background``, every process's file) and each canary record, from its
    ``sent_at`` to ``sent_at + latency_s``; the canary's window is its whole life. The witness where the engine
    gives none (no /metrics, a router): it counts what the engine queues too, and what was sent but not yet
    received, so it can only read high, never miss a request the client had out. All NaN for a run without
    background rows: its count would leave out what it never recorded."""
    n = len(frame)
    if n == 0 or background is None:  # no background file (an older run, a hand-made folder): nothing to count
        return frame.assign(**{k: np.full(n, np.nan) for k in CLIENT_OTHERS})
    sent = frame["sent_at"].to_numpy(dtype=np.float64)
    end = sent + frame["latency_s"].to_numpy(dtype=np.float64)
    bg_sent = background["sent_at"].to_numpy(dtype=np.float64)
    bg_end = bg_sent + background["latency_s"].to_numpy(dtype=np.float64)
    lo, med, hi = window_inflight(sent, end, np.concatenate([sent, bg_sent]), np.concatenate([end, bg_end]))
    others = (np.maximum(v - 1.0, 0.0) for v in (lo, med, hi))  # the canary itself is in flight throughout
    return frame.assign(**dict(zip(CLIENT_OTHERS, others, strict=True)))


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
    at_level: Floats  # the median in the level's band (loadgen.core.band): 1.0 / 0.0 / NaN unknown
    client: tuple[Floats, Floats, Floats]  # the client's own count (min, median, max), whatever the source
    bound: npt.NDArray[np.object_]  # the record's level_bound ("floor", "ceiling") or None

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
    ``scraped_columns``: another scraped figure (a prefill/decode side's, ``reports.analysis.sides.OTHERS``), without
    batch sizes; ``promised`` False: the level promises nothing there (the side the background leaves quiet)."""
    idx = np.arange(len(frame), dtype=np.int64) if rows is None else rows
    nan = np.full(len(idx), np.nan)
    whole_engine = scraped_columns == ENGINE_OTHERS  # a prefill/decode side has neither batch sizes nor a client
    truth = [_floats(frame, k, idx) if whole_engine else nan for k in BATCH_OTHERS]
    trace = [_floats(frame, k, idx) if whole_engine else nan for k in TRACE_OTHERS]
    scraped = [_floats(frame, k, idx) for k in scraped_columns]
    client = (
        _floats(frame, CLIENT_OTHERS[0], idx),
        _floats(frame, CLIENT_OTHERS[1], idx),
        _floats(frame, CLIENT_OTHERS[2], idx),
    )
    fallback = client if whole_engine else (nan, nan, nan)
    has_truth = ~np.isnan(truth[0])
    has_trace = ~np.isnan(trace[0])
    has_scraped = ~np.isnan(scraped[0])
    lo, med, hi = (
        np.where(has_truth, t, np.where(has_trace, x, np.where(has_scraped, s, c)))
        for t, x, s, c in zip(truth, trace, scraped, fallback, strict=True)
    )
    source = np.where(
        has_truth,
        TRUTH,
        np.where(has_trace, TRACE, np.where(has_scraped, METRICS, np.where(np.isnan(fallback[0]), NONE, CLIENT))),
    ).astype(np.int8)
    burst = frame["burst"].to_numpy(dtype=bool)[idx] if "burst" in frame else np.zeros(len(idx), bool)
    expected = expected_others(frame["level"].to_numpy()[idx], frame["phase"].to_numpy()[idx], burst)
    if not promised:
        expected = np.zeros_like(expected)
    low, high = band_edges(expected)
    with np.errstate(invalid="ignore"):
        held = np.where(np.isnan(lo), np.nan, (lo >= expected).astype(np.float64))
        at_level = np.where(np.isnan(med), np.nan, ((med >= low) & (med <= high)).astype(np.float64))
    bound = frame["level_bound"].to_numpy(dtype=object)[idx] if "level_bound" in frame else np.full(len(idx), None)
    return Measured(lo, med, hi, source, expected, held, _floats(frame, "held_at_send", idx), at_level, client, bound)


def band_edges(expected: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``loadgen.core.band.level_band`` for every row: the low and high edges of each promise's band."""
    values, inverse = np.unique(expected, return_inverse=True)
    edges = np.array([level_band(int(v)) for v in values], dtype=np.int64).reshape(-1, 2)
    return edges[:, 0][inverse.ravel()], edges[:, 1][inverse.ravel()]


def whole(x: Any) -> float | int | None:
    """A count as a JSON number: an int when it is whole (gauges arrive as floats), None for NaN."""
    v = num(x)
    return int(v) if isinstance(v, float) and v.is_integer() else v


def level_block(m: Measured, sel: Mask) -> CoResidency:
    """``co_residency`` of one level (or any set of canaries): what they were measured to share."""
    known = sel & m.known
    src = m.source[known]
    source = next((SOURCE_NAMES[k] for k in (TRUTH, TRACE, METRICS, CLIENT) if (src == k).any()), None)
    promise = int(m.expected[sel].max()) if sel.any() else 0
    return {
        "source": source,
        "min": whole(m.lo[known].min()) if known.any() else None,
        "median": median(m.med[known]),
        "max": whole(m.hi[known].max()) if known.any() else None,
        "held": int((sel & (m.held == 1.0)).sum()),
        "not_held": int((sel & (m.held == 0.0)).sum()),
        "unmeasured": int((sel & ~m.known).sum()),
        "not_held_at_send": int((sel & (m.held_at_send == 0.0)).sum()),
        "band": list(level_band(promise)),
        "at_level": int((sel & (m.at_level == 1.0)).sum()),
        "not_at_level": int((sel & (m.at_level == 0.0)).sum()),
        "bound": _bound(m.bound[sel]),
        "client": _spread(m.client, sel),
        "client_vs_engine": _client_vs_engine(m, sel),
    }


def _bound(values: npt.NDArray[np.object_]) -> LevelBoundName | None:
    kinds = {v for v in values.tolist() if v in ("floor", "ceiling")}
    return None if not kinds else "mixed" if len(kinds) > 1 else kinds.pop()


def _spread(figures: tuple[Floats, Floats, Floats], sel: Mask) -> Spread | None:
    lo, med, hi = figures
    has = sel & ~np.isnan(med)
    if not has.any():
        return None
    return {"min": whole(lo[has].min()), "median": median(med[has]), "max": whole(hi[has].max())}


def _client_vs_engine(m: Measured, sel: Mask) -> ClientVsEngine | None:
    both = sel & np.isin(m.source, (TRUTH, TRACE, METRICS)) & ~np.isnan(m.client[1])
    if not both.any():
        return None
    diff = m.client[1][both] - m.med[both]
    return {
        "canaries": int(both.sum()),
        "median_difference": median(diff),
        "max_abs_difference": num(float(np.abs(diff).max())),
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
    apart = _client_vs_engine(m, sweep)
    if apart is not None and apart["max_abs_difference"]:
        out.append(
            f"The client's own count of its requests in flight was a median {apart['median_difference']:+g} from the "
            f"engine's figure (at most {apart['max_abs_difference']:g} apart) over {apart['canaries']} sweep canaries "
            "measured by both; the engine's is the one used (the client also counts what the engine queues or has "
            "not yet received)."
        )
    off = sweep & (m.at_level == 0.0)
    if off.any():
        out.append(_off_level_notice(frame, m, off, level))
    gap = (engine_summary or {}).get("max_gap_s")
    if isinstance(gap, int | float) and gap > 1.0:
        gaps = (engine_summary or {}).get("gaps")
        counted = f" ({gaps} gap{'' if gaps == 1 else 's'} in all)" if isinstance(gaps, int) else ""
        out.append(
            f"The /metrics scraper went {gap:.1f} s without a sample{counted}: canaries in flight then have no "
            "scraped engine figure."
        )
    return out


def _off_level_notice(frame: Any, m: Measured, off: Mask, level: npt.NDArray[np.int64]) -> str:
    """The canaries measured outside their level's band, per level, the first few by request id with what they
    measured: none is left to rest on its label."""
    parts = []
    ids = frame["request_id"].to_numpy()
    sent = frame["sent_at"].to_numpy(dtype=np.float64)
    for lv in np.unique(level[off]).tolist():
        rows = np.flatnonzero(off & (level == lv))
        rows = rows[np.argsort(sent[rows], kind="stable")]
        low, high = level_band(int(m.expected[rows[0]]))
        named = ", ".join(f"{ids[r]} ({SOURCE_NAMES.get(int(m.source[r]), '?')} {m.med[r]:g})" for r in rows[:3])
        more = ", …" if len(rows) > 3 else ""
        parts.append(f"level {lv}: {len(rows)} outside {low}-{high} ({named}{more})")
    k = int(off.sum())
    return (
        f"{k} canar{'y was' if k == 1 else 'ies were'} not at {'its' if k == 1 else 'their'} level: the median of "
        f"the other requests measured over {'its' if k == 1 else 'their'} life left the level's band; "
        f"report.json's by_co_residency places {'it' if k == 1 else 'them'} by what was measured: "
        + "; ".join(parts)
        + "."
    )


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
    traced = int((sweep & (m.source == TRACE)).sum())
    scraped = int((sweep & (m.source == METRICS)).sum())
    if traced > truth and traced >= scraped:
        return {
            "source": SOURCE_NAMES[TRACE],
            "canaries": traced,
            "scrape_interval_s": None,
            "gauge_changes": None,
            "gauge_change_median_s": None,
            "refresh_steps": None,
            "summary": f"co-residency from the engine's step trace: the requests in every step that computed each of "
            f"{traced} sweep canaries (exact)",
        }
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
    client = int((sweep & (m.source == CLIENT)).sum())
    if not scraped and client:
        return {
            "source": SOURCE_NAMES[CLIENT],
            "canaries": client,
            "scrape_interval_s": None,
            "gauge_changes": None,
            "gauge_change_median_s": None,
            "refresh_steps": None,
            "summary": f"co-residency from the client's own count of its requests in flight over {client} sweep "
            "canaries (the engine gave no figure): it also counts requests the engine queued or had not yet received",
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


def gauge_vs_trace(frame: Any) -> ClientVsEngine | None:
    """How far the ``/metrics`` running gauge's median over each canary's life was from the engine trace's (gauge
    minus trace, over the canaries that have both), or None where no canary has both."""
    if TRACE_OTHERS[1] not in frame or ENGINE_OTHERS[1] not in frame:
        return None
    gauge, trace = _floats(frame, ENGINE_OTHERS[1]), _floats(frame, TRACE_OTHERS[1])
    both = ~np.isnan(gauge) & ~np.isnan(trace)
    if not both.any():
        return None
    diff = gauge[both] - trace[both]
    return {
        "canaries": int(both.sum()),
        "median_difference": median(diff),
        "max_abs_difference": num(float(np.abs(diff).max())),
    }
