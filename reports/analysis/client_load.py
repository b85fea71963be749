"""Was the load generator the limit? Per level, the busiest load process's CPU share, and a notice when full.

Why: a load process at a full core cannot start requests when the level asks (256 streamed users on one
core left a server with 145-211 requests in flight while the report said 256), and the only trace it
leaves is its own CPU use (``collectors.client_cpu``). A process's *demand* is the CPU it used plus the time it was
ready to run but waited for a core (a shared machine can starve it below one core). A level whose busiest
process demanded more than ``BOUND_SHARE`` of a core while the level ran is *generator-bound*: the
figures at that level may describe fewer
concurrent requests than the level names (docs/design.md, "held"); more load processes fix it.

Pure: samples in, JSON-ready rows and notice strings out. A run without samples (older runs) gets no
rows and no notice.
"""

from __future__ import annotations

from collections import defaultdict

from collectors.client_cpu import ClientCpuSample
from reports.model.report import ClientLoad, ClientLoadLevel

BOUND_SHARE = 0.85  # of one core, averaged over the level: above it the process is the limit
_LEVEL_PHASES = ("baseline", "sweep", "burst")  # stages that hold a level; warm-up and drain are left out


def per_level(samples: list[ClientCpuSample]) -> list[ClientLoadLevel]:
    """One row per level, in level order: ``concurrency``, ``processes`` (that ran it), ``busiest_share``
    (CPU seconds over wall seconds of the busiest process, 1.0 = one full core), ``mean_share`` (over the
    processes), ``busiest_demand`` (CPU plus waiting for a core, over wall seconds, of the neediest
    process), ``seconds`` (wall time sampled), ``generator_bound`` (demand above ``BOUND_SHARE``)."""
    cpu: dict[int, dict[tuple[str, int], float]] = defaultdict(lambda: defaultdict(float))
    wait: dict[int, dict[tuple[str, int], float]] = defaultdict(lambda: defaultdict(float))
    wall: dict[int, dict[tuple[str, int], float]] = defaultdict(lambda: defaultdict(float))
    for s in samples:
        if s.level is None or s.phase not in _LEVEL_PHASES:
            continue
        key = (s.worker, s.pid)
        cpu[s.level][key] += s.cpu_s
        wait[s.level][key] += s.wait_s or 0.0
        wall[s.level][key] += s.t1 - s.t0
    rows: list[ClientLoadLevel] = []
    for level in sorted(cpu):
        keys = [k for k in cpu[level] if wall[level][k] > 0]
        if not keys:
            continue
        shares = [cpu[level][k] / wall[level][k] for k in keys]
        demand = max((cpu[level][k] + wait[level][k]) / wall[level][k] for k in keys)
        rows.append(
            {
                "concurrency": level,
                "processes": len(shares),
                "busiest_share": round(max(shares), 3),
                "mean_share": round(sum(shares) / len(shares), 3),
                "busiest_demand": round(demand, 3),
                "seconds": round(max(wall[level].values()), 2),
                "generator_bound": demand > BOUND_SHARE,
            }
        )
    return rows


def notices(rows: list[ClientLoadLevel]) -> list[str]:
    """One notice naming every generator-bound level, with the advice, or none."""
    bound = [r for r in rows if r["generator_bound"]]
    if not bound:
        return []
    levels = ", ".join(str(r["concurrency"]) for r in bound)
    worst = max(r["busiest_demand"] for r in bound)
    return [
        f"Generator-bound at level {levels}: a load process needed up to {100 * worst:.0f}% of a core while the "
        f"level ran (CPU used plus time waiting for a core; above {100 * BOUND_SHARE:.0f}%), so requests may have "
        "started late and the engine may have "
        "run fewer than the level names; add --processes (--processes auto picks a count from the cores)."
    ]


def summary_line(rows: list[ClientLoadLevel]) -> str | None:
    """``level: CPU% (needed%)`` per level, for the report's context lines; None without samples."""
    if not rows:
        return None
    parts = [
        f"{r['concurrency']}: {100 * r['busiest_share']:.0f}% ({100 * r['busiest_demand']:.0f}%)"
        + (" bound" if r["generator_bound"] else "")
        for r in rows
    ]
    return (
        "Client CPU per level (busiest load process, share of one core used, and in brackets needed: used plus "
        "waiting for a core): " + ", ".join(parts)
    )


def section(samples: list[ClientCpuSample]) -> ClientLoad:
    """``report.json``'s ``client_load``: the rows, the threshold, and the levels found generator-bound."""
    rows = per_level(samples)
    return {
        "bound_share": BOUND_SHARE,
        "levels": rows,
        "generator_bound_levels": [r["concurrency"] for r in rows if r["generator_bound"]],
        "summary": summary_line(rows),
    }
