"""Co-residency: what the engine really ran while each canary was in flight, as per-canary figures.

Why: a canary's ``level`` is the load this generator asked for; the engine's running gauge (scraped
from ``/metrics``) and, where the engine gives it, the batch size of every step the request was in
say what it got. Both come as many values per canary (samples inside its lifetime, steps of its
batch); the report needs their min, median and max for up to a million canaries, so everything
here works on flat arrays with segment offsets, never a Python loop per canary.

Two functions: ``segment_stats`` (min / median / max of each segment of a flat array) and
``window_running`` (for each canary window ``[sent_at, sent_at + latency_s]``, the running gauge of
the samples inside it). Pure: numpy only, no I/O. Missing is NaN (and a count of 0), never 0.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
_CHUNK_ELEMS = 1 << 22  # gathered window samples per pass: bounded temporaries whatever the run's size
_DIRECT_MAX = 1 << 24  # whole values below this rank themselves


def _ranked_stats(ranks: Ints, table: Floats, lengths: Ints) -> tuple[Floats, Floats, Floats]:
    """Stats of consecutive segments of ``ranks`` (integer ranks into the sorted ``table``); every
    length here is at least 1. Sorting one integer key (segment, rank) orders every segment at once."""
    n_seg = len(lengths)
    seg = np.repeat(np.arange(n_seg, dtype=np.int64), lengths)
    width = np.int64(max(len(table), 1))
    key = np.sort(seg * width + ranks)
    ordered = key - seg * width  # seg is non-decreasing, so segment i still spans the same offsets
    start = np.cumsum(lengths) - lengths
    lo = table[ordered[start + (lengths - 1) // 2]]
    hi = table[ordered[start + lengths // 2]]
    return table[ordered[start]], (lo + hi) / 2.0, table[ordered[start + lengths - 1]]


def _ranks(values: Floats) -> tuple[Ints, Floats]:
    """Integer ranks of finite ``values`` into a sorted table of them. Gauges and batch sizes are small
    whole numbers: then the value is its own rank (no sort); anything else goes through ``np.unique``."""
    if values.size and float(values.min()) >= 0 and float(values.max()) < _DIRECT_MAX:
        whole = values.astype(np.int64)
        if bool((whole == values).all()):
            return whole, np.arange(int(whole.max()) + 1, dtype=np.float64)
    table, inverse = np.unique(values, return_inverse=True)
    return inverse.astype(np.int64).ravel(), table


def segment_stats(flat: npt.ArrayLike, lengths: npt.ArrayLike) -> tuple[Floats, Floats, Floats]:
    """Min, median and max of each segment of ``flat`` (segments laid end to end, ``lengths[i]``
    values each; a length of 0 or -1 means none). NaN for a segment with no finite value; NaN values
    inside a segment are dropped."""
    values = np.asarray(flat, dtype=np.float64)
    lens = np.asarray(lengths, dtype=np.int64).clip(0)
    n = len(lens)
    out = (np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan))
    if values.size == 0:
        return out
    finite = np.isfinite(values)
    if not finite.all():  # drop NaN values and shorten their segments
        seg = np.repeat(np.arange(n, dtype=np.int64), lens)
        lens = np.bincount(seg[finite], minlength=n).astype(np.int64)
        values = values[finite]
    has = lens > 0
    if not has.any():
        return out
    ranks, table = _ranks(values)
    mins, meds, maxs = _ranked_stats(ranks, table, lens[has])
    out[0][has], out[1][has], out[2][has] = mins, meds, maxs
    return out


def window_running(
    start: npt.ArrayLike, end: npt.ArrayLike, t: npt.ArrayLike, running: npt.ArrayLike, chunk: int = _CHUNK_ELEMS
) -> tuple[Floats, Floats, Floats, Ints]:
    """For each window ``[start[i], end[i]]`` (both ends included): the min, median and max running
    count of the samples with ``start <= t <= end``, and how many there were.

    Samples need not be sorted; a sample whose time or count is NaN is ignored. A window with a NaN
    end (a failed canary with no latency) or an end before its start holds no sample. NaN stats and
    a count of 0 where a window holds none. Work is ``O((windows + samples inside them) log)``, in
    passes of at most ``chunk`` gathered samples."""
    s = np.asarray(start, dtype=np.float64)
    e = np.asarray(end, dtype=np.float64)
    ts = np.asarray(t, dtype=np.float64)
    vals = np.asarray(running, dtype=np.float64)
    n = len(s)
    mins, meds, maxs = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    count = np.zeros(n, np.int64)
    keep = np.isfinite(ts) & np.isfinite(vals)
    if n == 0 or not keep.any():
        return mins, meds, maxs, count
    ts, vals = ts[keep], vals[keep]
    if not bool((ts[1:] >= ts[:-1]).all()):  # the reader hands them sorted already
        order = np.argsort(ts, kind="stable")
        ts, vals = ts[order], vals[order]
    ranks, table = _ranks(vals)
    with np.errstate(invalid="ignore"):
        valid = np.isfinite(s) & np.isfinite(e) & (e >= s)
    lo = np.searchsorted(ts, np.where(valid, s, 0.0), side="left")
    hi = np.searchsorted(ts, np.where(valid, e, 0.0), side="right")
    count[valid] = (hi - lo)[valid]
    idx = np.flatnonzero(count > 0)
    if len(idx) == 0:
        return mins, meds, maxs, count
    # passes: consecutive windows whose samples together stay under ``chunk`` (a bigger window alone)
    cum = np.cumsum(count[idx])
    a = 0
    while a < len(idx):
        base = cum[a - 1] if a else 0
        b = max(a + 1, int(np.searchsorted(cum, base + chunk, side="right")))
        w = idx[a:b]
        lens, first = count[w], lo[w]
        offs = np.cumsum(lens) - lens
        pos = np.arange(int(lens.sum()), dtype=np.int64) + np.repeat(first - offs, lens)
        mins[w], meds[w], maxs[w] = _ranked_stats(ranks[pos], table, lens)
        a = b
    return mins, meds, maxs, count


GRID_S = 0.005  # the client's count is read every this often inside each window for its time-weighted median
_GRID_MAX = 4_000_000  # grid points over the whole span at most: a long run reads it more coarsely


def _count_at(starts: Floats, ends: Floats, t: Floats) -> Floats:
    """Requests in flight at each ``t`` (started at or before it, not ended at or before it)."""
    inflight = np.searchsorted(starts, t, side="right") - np.searchsorted(ends, t, side="right")
    return inflight.astype(np.float64)


def window_inflight(
    start: npt.ArrayLike, end: npt.ArrayLike, req_start: npt.ArrayLike, req_end: npt.ArrayLike, grid_s: float = GRID_S
) -> tuple[Floats, Floats, Floats]:
    """For each window ``[start[i], end[i])``: the min, time-weighted median and max number of requests in flight
    among ``req_start``/``req_end`` (every request the client sent, each window's own request among them).

    Exact for the min and max: a count changes only where a request starts or ends, so its values over a window
    are its value at the window's start and after each start or end inside it. The median is read on a grid every
    ``grid_s`` seconds (coarser where a run is long enough to need more than ``_GRID_MAX`` points), so each value
    weighs as long as it lasted; a window between two grid points takes its value at its start. A request with a
    NaN end (it failed before any answer and has no latency) is left out; a window with a NaN or non-positive
    length gets NaN. Pure numpy, no Python loop per window."""
    s = np.asarray(start, dtype=np.float64)
    e = np.asarray(end, dtype=np.float64)
    rs = np.asarray(req_start, dtype=np.float64)
    re_ = np.asarray(req_end, dtype=np.float64)
    n = len(s)
    nan = np.full(n, np.nan)
    keep = np.isfinite(rs) & np.isfinite(re_)
    with np.errstate(invalid="ignore"):
        valid = np.isfinite(s) & np.isfinite(e) & (e > s)
    if n == 0 or not keep.any() or not valid.any():
        return nan, nan.copy(), nan.copy()
    starts, ends = np.sort(rs[keep]), np.sort(re_[keep])
    s_v, last = s[valid], np.nextafter(e[valid], -np.inf)  # the window's own end is not inside it
    at_start = _count_at(starts, ends, s_v)
    events = np.unique(np.concatenate([starts, ends]))
    lo, _, hi, _ = window_running(s_v, last, events, _count_at(starts, ends, events))
    lo, hi = np.fmin(lo, at_start), np.fmax(hi, at_start)
    t0, t1 = float(s_v.min()), float(last.max())
    step = max(grid_s, (t1 - t0) / _GRID_MAX)
    grid = t0 + step * np.arange(int((t1 - t0) / step) + 1, dtype=np.float64)
    _, med, _, count = window_running(s_v, last, grid, _count_at(starts, ends, grid))
    med = np.where(count > 0, med, at_start)
    out = (nan.copy(), nan.copy(), nan.copy())
    out[0][valid], out[1][valid], out[2][valid] = lo, med, hi
    return out
