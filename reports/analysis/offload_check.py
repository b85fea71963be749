"""Was an engine asked for a KV offload tier, and did the tier's store/load byte counters ever move? Pure.

Why: "recompute still produces the same output", so a cell that asked for offload and whose engine never stored
into the tier nor loaded back from it measured nothing about offload, and must say so (docs/design.md, "Where the
KV came from"). What was asked is read from the manifest (``engine.kv_offload``, a topology process's) or the
server's own ``kv_offloading_size`` label of ``vllm:cache_config_info``; what moved from the engines'
``offload_store_bytes`` and ``offload_load_bytes`` counters. Run data in, a typed block and sentences out; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.read.runfolder import KvSeries, RunData
from reports.model.provenance import KvOffloadCheck


def _rise(values: npt.NDArray[np.float64]) -> float | None:
    v = values[np.isfinite(values)]
    return float(v[-1] - v[0]) if v.size else None


def offload_check(
    engine: Mapping[str, Any] | None, info: Mapping[str, Mapping[str, str]], series: Sequence[KvSeries]
) -> KvOffloadCheck | None:
    """Whether an engine of the run was asked for an offload tier (the manifest's ``engine.kv_offload``, a
    topology process's, or the server's own ``kv_offloading_size`` label of ``vllm:cache_config_info``) and whether
    the tier's store/load byte counters rose over the run; None where no tier was asked for."""
    procs = (engine or {}).get("servers") or []
    asked_by = None
    if (engine or {}).get("kv_offload") or any(isinstance(p, Mapping) and p.get("kv_offload") for p in procs):
        asked_by = "manifest"
    elif str(info.get("vllm:cache_config_info", {}).get("kv_offloading_size", "None")) not in ("None", "", "none"):
        asked_by = "server"
    if asked_by is None:
        return None
    store = [r for kv in series if (r := _rise(kv.store_bytes)) is not None]
    load = [r for kv in series if (r := _rise(kv.load_bytes)) is not None]
    return {
        "asked_by": asked_by,
        "store_bytes": sum(store) if store else None,
        "load_bytes": sum(load) if load else None,
        "moved": None if not store or not load else bool(sum(store) > 0 and sum(load) > 0),
    }


def notices(check: KvOffloadCheck | None) -> list[str]:
    if check is None or check["moved"]:
        return []
    if check["moved"] is None:
        return [
            "An offload tier was asked for, but no engine published its store/load byte counters "
            "(kv_offload_store_bytes, kv_offload_load_bytes): the offload path is unproven."
        ]
    never = [
        what
        for what, v in (("stored anything in it", check["store_bytes"]), ("loaded anything back", check["load_bytes"]))
        if not v
    ]
    return [
        f"An offload tier was asked for, but the engine never {' nor '.join(never)} (its store/load byte counters "
        "never moved): no canary of this run went through the offload path."
    ]


def of_run(run: RunData) -> KvOffloadCheck | None:
    """``offload_check`` over the run's manifest, its probe's ``*_info`` series and every engine's counters."""
    series = [kv for kv in (run.engine_kv, *(s.kv for s in run.servers)) if kv is not None]
    return offload_check(run.manifest.engine, run.manifest.server.get("config", {}).get("info_series", {}), series)
