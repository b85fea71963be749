"""Per-side co-residency of a prefill/decode run: each canary's prefill window on the prefill server(s), its
decode life on the decode server(s), and the heatmap of one side's load against the other's.

docs/design.md ("Prefill/decode: servers behind one endpoint"): a canary sent through a router spends its life
from its send to its first token on the prefill side (the prefill leg, the hand-over of its KV) and from its
first token to its last byte on the decode side. Each side's figure is the window join of that side's running
gauge (``collectors.read.coresidency.window_running``) over that part of its life, minus the canary itself, as the
one-engine join (``reports.analysis.coresidency.join_engine``) is over the whole. A canary that was not streamed has no
first token of its own: both windows are then its whole life, and a notice says so.

The columns are computed at report time, never stored in the records: ``prefill_others_min/median/max``,
``prefill_samples``, ``decode_others_*``, ``decode_samples`` and ``prefill_window_known``; the side the
background loads (``background.side``) also fills ``engine_others_*``, so ``co_residency``, ``held`` and
``by_co_residency`` read it. Pure: frames and arrays in, frames, arrays and typed dicts out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from collectors.read.coresidency import window_running
from collectors.read.runfolder import BATCH_OTHERS, ServerSeries
from loadgen.core.servers import SIDES, Side
from reports.analysis.coresidency import ENGINE_OTHERS
from reports.model.coresidency import SidesHeatmap

Floats = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]
OTHERS: dict[Side, tuple[str, str, str]] = {
    s: (f"{s}_others_min", f"{s}_others_median", f"{s}_others_max") for s in SIDES
}
SAMPLES: dict[Side, str] = {s: f"{s}_samples" for s in SIDES}
WINDOW_KNOWN = "prefill_window_known"  # the canary was streamed: its first token splits its life
ALIGN_S = 1.0  # a side of several servers: a server's last sample counts this long after it was taken


class SideWindows(NamedTuple):
    """Each canary's life split at its first token: ``[prefill_start, prefill_end]`` then ``[decode_start,
    decode_end]``; where the first token is unknown (``known`` false) both are the whole life."""

    prefill_start: Floats
    prefill_end: Floats
    decode_start: Floats
    decode_end: Floats
    known: Mask


def side_windows(sent: npt.ArrayLike, ttft: npt.ArrayLike, latency: npt.ArrayLike) -> SideWindows:
    """The two windows of every canary (epoch seconds). The first token is clipped into the life, so the prefill
    window ends where the decode window starts and the two together are exactly ``[sent, sent + latency]``."""
    s = np.asarray(sent, dtype=np.float64)
    life = np.asarray(latency, dtype=np.float64)
    first = np.asarray(ttft, dtype=np.float64)
    end = s + life
    with np.errstate(invalid="ignore"):
        known = np.isfinite(first) & np.isfinite(life)
        split = s + np.clip(np.where(known, first, 0.0), 0.0, np.where(np.isfinite(life), life, 0.0))
    return SideWindows(s, np.where(known, split, end), np.where(known, split, s), end, known)


def side_series(servers: Sequence[ServerSeries], side: Side) -> tuple[Floats, Floats] | None:
    """The running gauge of a side: its one server's, or the sum over its servers (a ``both`` server counts on
    either side) at every sample time of any of them, each server at its last sample no older than
    ``ALIGN_S`` (NaN where one has none). None when no server serves the side."""
    members = [s for s in servers if s.role in (side, "both")]
    if not members:
        return None
    if len(members) == 1:
        return members[0].t, members[0].running
    times = np.unique(np.concatenate([m.t for m in members]))
    total = np.zeros(len(times))
    for m in members:
        if len(m.t) == 0:
            return times, np.full(len(times), np.nan)
        at = np.searchsorted(m.t, times, side="right") - 1
        ok = (at >= 0) & (times - m.t[np.clip(at, 0, None)] <= ALIGN_S)
        total += np.where(ok, m.running[np.clip(at, 0, None)], np.nan)
    return times, total


def join_sides(frame: Any, servers: Sequence[ServerSeries], loaded: Side, edge_s: float = 0.05) -> Any:
    """``frame`` plus each side's co-residency over its window (``SideWindows``), gauge - 1 never below 0; the
    ``loaded`` side's also as ``engine_others_*``/``engine_samples``/``engine_running``, and the records' batch
    sizes set aside: through a router they mix the prefill server's step with the decode server's.

    Edges: the decode window ends one scrape interval (``edge_s``) before the last byte, as the one-engine join
    does; a window without a first token (not streamed) starts ``edge_s`` after the send. The prefill window
    of a streamed canary is kept whole: it is short, and the canary is on the prefill side from its send."""
    n = len(frame)
    w = side_windows(frame["sent_at"].to_numpy(dtype=np.float64), _col(frame, "ttft_s"), _col(frame, "latency_s"))
    spans: dict[Side, tuple[Floats, Floats]] = {
        "prefill": (
            np.where(w.known, w.prefill_start, w.prefill_start + edge_s),
            np.where(w.known, w.prefill_end, w.prefill_end - edge_s),
        ),
        "decode": (np.where(w.known, w.decode_start, w.decode_start + edge_s), w.decode_end - edge_s),
    }
    columns: dict[str, Any] = {WINDOW_KNOWN: w.known}
    medians: dict[Side, Floats] = {}
    for side in SIDES:
        series = side_series(servers, side)
        lo = med = hi = np.full(n, np.nan)
        count = np.zeros(n, np.int64)
        if series is not None and n:
            lo, med, hi, count = window_running(*spans[side], *series)
        medians[side] = med
        names = OTHERS[side]
        columns.update({names[0]: np.maximum(lo - 1.0, 0.0), names[1]: np.maximum(med - 1.0, 0.0)})
        columns.update({names[2]: np.maximum(hi - 1.0, 0.0), SAMPLES[side]: count})
    own = frame["engine_running"].to_numpy(dtype=np.float64)
    loaded_count = columns[SAMPLES[loaded]]
    columns.update({e: columns[o] for e, o in zip(ENGINE_OTHERS, OTHERS[loaded], strict=True)})
    columns.update({k: np.full(n, np.nan) for k in BATCH_OTHERS})
    return frame.assign(
        **columns, engine_samples=loaded_count, engine_running=np.where(loaded_count > 0, medians[loaded], own)
    )


def _col(frame: Any, name: str) -> Floats:
    return frame[name].to_numpy(dtype=np.float64) if name in frame else np.full(len(frame), np.nan)


def heatmap(prefill: npt.NDArray[np.int64], decode: npt.NDArray[np.int64], diverged: Mask) -> SidesHeatmap | None:
    """Completions by prefill-side load (rows) and decode-side load (columns), each a group of other requests
    (a canary's median on that side, rounded); per cell how many and how many diverged. ``prefill`` and
    ``decode`` are -1 where unmeasured: those completions are left out. None when none is measured on both."""
    both = (prefill >= 0) & (decode >= 0)
    if not both.any():
        return None
    rows, cols = np.unique(prefill[both]), np.unique(decode[both])
    r, c = np.searchsorted(rows, prefill[both]), np.searchsorted(cols, decode[both])
    n = np.zeros((len(rows), len(cols)), np.int64)
    k = np.zeros_like(n)
    np.add.at(n, (r, c), 1)
    np.add.at(k, (r, c), diverged[both].astype(np.int64))
    return {
        "prefill_others": rows.tolist(),
        "decode_others": cols.tolist(),
        "completions": n.tolist(),
        "diverged": k.tolist(),
        "rate": [
            [None if nn == 0 else kk / nn for nn, kk in zip(nr, kr, strict=True)]
            for nr, kr in zip(n.tolist(), k.tolist(), strict=True)
        ],
    }
