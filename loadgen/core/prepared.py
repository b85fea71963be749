"""What a prepared run's plan says, read once from its manifest and typed: the servers behind the endpoint, the
canaries a level sends, the claim asked for, how often ``/metrics`` is scraped, the side the background loads.

Why: the run's owner, the run-folder reader and the report each dug these out of the manifest's resolved
scenario (a plain JSON mapping) on their own, with ``.get(...)`` chains that could disagree on a missing or odd
value. ``PreparedRun.of`` is that reading once; a run folder's reader keeps the value (``RunData.prepared``).
Pure: no I/O (the manifest is read by its callers), no verdict (``reports.analysis.verdict`` judges with it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loadgen.core.manifest import Manifest
from loadgen.core.runfiles import RECORDS_LIMIT
from loadgen.core.scenario import Server
from loadgen.core.scenario.phase import parse_phase
from loadgen.core.scenario.schema import MAX_RESPONSE_BYTES
from loadgen.core.servers import SIDES, Side, loaded_side, servers_of


@dataclass(frozen=True)
class PreparedRun:
    """``servers``: the engines behind the endpoint (``endpoint.servers``; none for one engine).
    ``level_quota``: canaries sent at one level (per level times the scenario's canaries, round-robin); None
    where the manifest gives no per-level count. ``claim_max_rate``: the P of "divergence rate < P at 95%"
    the run asked for (``sweep.claim_max_rate``), None where none or out of (0, 1). ``metrics_interval_s``: the
    scraper's period asked for, None for its default. ``loaded_side``: the side the background loads,
    ``background.side`` where it names one, else decode (``loadgen.core.servers.loaded_side``).
    ``background_phase``: ``background.phase``, normalised (``loadgen.core.scenario.phase``); "all" where the
    manifest predates it or holds no mode, as such runs' background was held throughout. ``max_response_bytes``:
    where responses were cut (``endpoint.max_response_bytes``; its default where the manifest gives no count of
    at least 1 KiB), which bounds how long a record of the run can be."""

    servers: tuple[Server, ...]
    level_quota: int | None
    claim_max_rate: float | None
    metrics_interval_s: float | None
    loaded_side: Side
    background_phase: str = "all"
    max_response_bytes: int = MAX_RESPONSE_BYTES

    @classmethod
    def of(cls, m: Manifest) -> PreparedRun:
        sc = m.scenario
        canaries = sc.get("canaries")
        per_level = m.canaries_per_level
        quota = None if per_level is None else per_level * max(1, len(canaries) if isinstance(canaries, list) else 1)
        rate = _number(_section(sc, "sweep").get("claim_max_rate"))
        every = _number(_section(sc, "endpoint").get("metrics_interval_s"))
        side = _section(sc, "background").get("side")
        phase = _section(sc, "background").get("phase")
        cut = _section(sc, "endpoint").get("max_response_bytes")
        return cls(
            servers=tuple(servers_of(sc)),
            level_quota=quota,
            claim_max_rate=rate if rate is not None and 0 < rate < 1 else None,
            metrics_interval_s=every if every is not None and every > 0 else None,
            loaded_side=loaded_side(next((s for s in SIDES if s == side), None)),
            background_phase=_phase(phase),
            max_response_bytes=min(cut, RECORDS_LIMIT) if type(cut) is int and cut >= 1024 else MAX_RESPONSE_BYTES,
        )


def _section(scenario: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    got = scenario.get(name)
    return got if isinstance(got, Mapping) else {}


def _phase(value: object) -> str:
    try:
        return str(parse_phase(value)) if isinstance(value, str) else "all"
    except ValueError:
        return "all"


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
