"""``in_flight.json`` of a reproducer: what shared the endpoint with one canary record while it ran.

The level and held flags at send, the engine's batch sizes and ``/metrics`` samples over the record's
life, its measured co-residency, the background requests and other canaries whose lifetimes overlapped
its own. ``lifetime`` and ``overlaps`` are also what the CLI filters the background rows by as it
streams them in, so the rows it keeps and the rows counted here follow one rule.

Pure: records and rows in, a dict out. Never reads a file (the CLI streams the rows in) and never
decides which record (``reports.repro.choice``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from collectors.read.runfolder import RunData
from loadgen.core.stats import num
from reports.analysis import coresidency
from reports.repro.choice import Choice


def lifetime(record: dict[str, Any]) -> tuple[float, float]:
    """Send time and end (send + own-clock latency; the send time itself where no latency was recorded)."""
    start = _f(record.get("sent_at"))
    lat = _f(record.get("latency_s"))
    return start, start + (lat if np.isfinite(lat) and lat > 0 else 0.0)


def overlaps(row: dict[str, Any], start: float, end: float) -> bool:
    """A background row whose send..end window overlaps ``[start, end)`` (no latency: a point at its send)."""
    b0, b1 = lifetime(row)
    if not np.isfinite(b0):
        return False
    return b0 < end and (b1 > start or (b1 == b0 and b0 >= start))


def in_flight(
    run: RunData, choice: Choice, record: dict[str, Any], background: Iterable[dict[str, Any]]
) -> dict[str, Any]:
    """What shared the endpoint with this record: the level and checks at send, the engine's own figures,
    and the background requests (and other canaries) whose lifetimes overlapped its own."""
    start, end = lifetime(record)
    rows = [r for r in background if overlaps(r, start, end)]
    rows.sort(key=lambda r: _f(r.get("sent_at")))
    shapes = []
    for r in rows:
        b0, b1 = lifetime(r)
        shapes.append(
            {
                "start_s": _round(b0 - start),  # relative to the canary's send
                "end_s": _round(b1 - start) if r.get("latency_s") is not None else None,
                "whole_lifetime": b0 <= start and b1 >= end,
                "level": r.get("level"),
                "phase": r.get("phase"),
                "status": r.get("status"),
                "error_kind": r.get("error_kind"),
                "prompt_tokens": r.get("prompt_tokens"),
                "completion_tokens": r.get("completion_tokens"),
                "shared_prefix": r.get("shared_prefix"),
                "ttft_s": r.get("ttft_s"),
            }
        )
    scenario_bg = run.manifest.scenario.get("background") if isinstance(run.manifest.scenario, dict) else None
    scenario_bg = scenario_bg if isinstance(scenario_bg, dict) else {}
    sizes = record.get("engine_batch_sizes")
    concurrent = _concurrent(rows, start, end)
    return {
        "window": {"sent_at": start, "ended_at": end, "latency_s": record.get("latency_s")},
        "level": record.get("level"),
        "phase": record.get("phase"),
        "burst": bool(record.get("burst")),
        "held_at_send": record.get("held_at_send"),
        "background_held_at_send": record.get("background_held_at_send"),
        "inflight_at_send": record.get("inflight_at_send"),
        "engine_batch_sizes": sizes if isinstance(sizes, list) else None,
        "co_residency": choice.co_residency,
        "engine_running_samples": _running_samples(run, start, end),
        "background": {
            "overlapping": len(shapes),
            "whole_lifetime": sum(1 for s in shapes if s["whole_lifetime"]),
            "concurrent_min": concurrent[0],
            "concurrent_max": concurrent[1],
            "prompt_tokens": _spread(s["prompt_tokens"] for s in shapes),
            "completion_tokens": _spread(s["completion_tokens"] for s in shapes),
            "shared_prefix": sum(1 for s in shapes if s["shared_prefix"] is True),
            # not recorded per request: the run's [background] settings every one of them was drawn from
            "stream": scenario_bg.get("stream"),
            "max_tokens_range": scenario_bg.get("max_tokens"),
            "prompt_words_range": scenario_bg.get("prompt_words"),
            "requests": shapes,
        },
        "other_canaries": _other_canaries(run, choice, start, end),
    }


def _concurrent(rows: list[dict[str, Any]], start: float, end: float) -> tuple[int, int]:
    """Fewest and most background requests in flight at any instant of ``[start, end)`` (a request
    without a recorded latency holds no slot)."""
    spans = [(b0, b1) for b0, b1 in map(lifetime, rows) if b1 > b0]
    level = sum(1 for b0, b1 in spans if b0 <= start < b1)
    events = sorted(
        [(b0, 1) for b0, _ in spans if start < b0 < end] + [(b1, -1) for _, b1 in spans if start < b1 < end]
    )
    lo = hi = level
    for _, step in events:
        level += step
        lo, hi = min(lo, level), max(hi, level)
    return lo, hi


def _other_canaries(run: RunData, choice: Choice, start: float, end: float) -> list[dict[str, Any]]:
    f = run.canaries.frame
    sent = f["sent_at"].to_numpy(dtype=np.float64)
    lat = np.nan_to_num(f["latency_s"].to_numpy(dtype=np.float64), nan=0.0)
    hit = (sent < end) & (sent + lat > start)
    hit[choice.row] = False
    return [
        {
            "canary_id": str(f["canary_id"].iloc[r]),
            "request_id": str(f["request_id"].iloc[r]),
            "phase": str(f["phase"].iloc[r]),
            "level": int(f["level"].iloc[r]),
            "start_s": _round(float(sent[r]) - start),
        }
        for r in np.flatnonzero(hit).tolist()
    ]


def _running_samples(run: RunData, start: float, end: float) -> list[list[float | None]]:
    """``[seconds after send, running]`` for each ``/metrics`` sample taken while the record was in flight."""
    if run.engine_t is None or run.engine_running is None:
        return []
    t = run.engine_t
    sel = (t >= start) & (t <= end)
    return [[_round(float(a) - start), num(b)] for a, b in zip(t[sel], run.engine_running[sel], strict=True)]


def _spread(values: Iterable[Any]) -> dict[str, Any] | None:
    vals = np.array(
        [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)], dtype=np.float64
    )
    vals = vals[np.isfinite(vals)]
    if vals.size == 0:
        return None
    return {
        "min": coresidency.whole(vals.min()),
        "median": float(np.median(vals)),
        "max": coresidency.whole(vals.max()),
    }


def _f(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else float("nan")


def _round(v: float) -> float:
    return round(v, 4)
