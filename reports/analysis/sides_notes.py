"""What a run through a router must say in words: its servers, why the x-axis is unmeasured, canaries without
a prefill window, and errors that name a server.

Why: the x-axis (what each canary really shared) is this tool's main claim, and a router hides it: it does not
expose its engines' ``/metrics`` (docs/design.md, "Prefill/decode: servers behind one endpoint"). A report that
shows a blank ``others`` column without saying why, or a router's 500 without saying that the prefill server
failed behind it, leaves the reader to guess. Pure: the manifest and the read run in, sentences out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from collectors.read.runfolder import ServerSeries
from loadgen.core.manifest import Manifest
from loadgen.core.scenario.schema import Server
from loadgen.core.servers import SIDES, label, named_in, serves
from reports.model.report import RunServer

FIX = (
    "a router (vllm-router, llm-d, Dynamo) does not expose its engines' /metrics: list the engines behind it under "
    "[[endpoint.servers]] (name, role, base_url, metrics_url) and each one's /metrics is read"
)


def _sampled(series: ServerSeries) -> bool:
    return bool(np.isfinite(series.running).any())


def run_servers(m: Manifest, series: Sequence[ServerSeries]) -> list[RunServer]:
    """``run.servers``: each server as the scenario named it, its metrics URL and what its scraper saw."""
    facts = {str(f.get("name")): f for f in m.servers}
    out: list[RunServer] = []
    for s in series:
        fact = facts.get(s.name, {})
        scraped = fact.get("engine_metrics") or {}
        out.append(
            {
                "name": s.name,
                "role": s.role,
                "base_url": fact.get("base_url"),
                "metrics_url": fact.get("metrics_url"),
                "samples": int(np.isfinite(s.running).sum()),
                "notice": scraped.get("notice"),
            }
        )
    return out


def x_axis_unmeasured(
    m: Manifest,
    servers: Sequence[Server],
    has_samples: bool,
    series: Sequence[ServerSeries],
    batch_measured: int,
    client_measured: int = 0,
) -> str | None:
    """Why no ``/metrics`` sample measured the canaries' co-residency, with the fix; None when some did (or the
    run watched no endpoint: a cold-boot study). ``batch_measured``: canaries the answers' batch sizes measured;
    ``client_measured``: canaries the client's own count of its requests in flight measured instead; ``servers``:
    the prepared run's servers behind the endpoint."""
    if servers:
        dark = [side for side in SIDES if not any(_sampled(x) for x in series if x.role in (side, "both"))]
        if not dark:
            return None
        names = ", ".join(label(s) for s in servers if any(serves(s, side) for side in dark))
        where = "The x-axis is unmeasured" if len(dark) == 2 else f"The {dark[0]} side's x-axis is unmeasured"
        return (
            f"{where}: {names} gave no /metrics samples (the run's notices say why); give each server its engine's "
            "own metrics_url (not the router's)."
        )
    summary = m.engine_metrics
    if summary is None or has_samples or summary.get("available") is not False:
        return None  # no endpoint watched (a cold-boot study), or its /metrics answered
    why = summary.get("notice") or f"{summary.get('url')}: no engine gauges"
    stand_in = (
        f" {batch_measured} canaries carried the engine's own batch sizes, which stand in; behind a prefill/decode "
        "router those mix the prefill server's step with the decode server's."
        if batch_measured
        else f" The client's own count of its requests in flight stands in for {client_measured} canaries (source "
        '"client"): it also counts what the engine queues, so a level it shows held may have run smaller.'
        if client_measured
        else ""
    )
    return f"The x-axis is unmeasured: no /metrics sample gave the engine's running requests ({why}); {FIX}.{stand_in}"


def notices(frame: Any, servers: Sequence[Server]) -> list[str]:
    """A prefill/decode run's notices: sweep canaries without a first token (their prefill window unknown), and
    canary errors whose message names a server (a router passes the failure of the server behind it on)."""
    out: list[str] = []
    sweep = frame["phase"].to_numpy() == "sweep"
    unknown = int((sweep & ~np.isfinite(frame["ttft_s"].to_numpy(dtype=np.float64))).sum())
    if unknown:
        out.append(
            f"{unknown} sweep canar{'y has' if unknown == 1 else 'ies have'} no first token (not streamed, or failed "
            "before it): the prefill window (sent .. first token) is unknown, so both sides' co-residency covers the "
            "whole life there; stream the canary (stream = true) to split it."
        )
    failed = frame["status"].to_numpy() == "error"
    messages = frame["error_message"].to_numpy()[failed] if "error_message" in frame else []
    counts: dict[str, tuple[Server, int, str]] = {}
    for msg in messages:
        hit = named_in(msg if isinstance(msg, str) else None, servers)
        if hit is not None:
            _, n, first = counts.get(hit.name, (hit, 0, str(msg)))
            counts[hit.name] = (hit, n + 1, first)
    for server, n, first in counts.values():
        out.append(
            f"{n} canary error{'' if n == 1 else 's'} came from {label(server)} at {server.base_url}, passed on by "
            f"the router (each record's error_message keeps it), e.g. {first[:200]!r}."
        )
    return out
