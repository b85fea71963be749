"""The servers behind one endpoint (``[[endpoint.servers]]``): which side each serves, where its ``/metrics`` is,
how a message names it, and which one a router's error names.

Why: a prefill/decode endpoint is a router in front of engines (docs/design.md, "Prefill/decode: servers behind
one endpoint"). Traffic goes to the router; the scraper, the held-level gate and the report read the servers,
each by the side it serves, and an error the router passes on names the server that failed by its URL. These
rules live once, here, for all of them. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import ValidationError

from loadgen.core.scenario.schema import Server
from loadgen.core.wire.urls import origin

Side = Literal["prefill", "decode"]
SIDES: tuple[Side, ...] = ("prefill", "decode")


def servers_of(scenario: Mapping[str, Any]) -> list[Server]:
    """The servers a resolved scenario (the manifest's ``scenario``) names; none for a run from before them (or
    an entry this version cannot read)."""
    endpoint = scenario.get("endpoint")
    raw = endpoint.get("servers") if isinstance(endpoint, Mapping) else None
    try:
        return [Server.model_validate(s) for s in raw] if isinstance(raw, list) else []
    except ValidationError:
        return []


def serves(server: Server, side: Side) -> bool:
    """A ``both`` server serves either side."""
    return server.role in (side, "both")


def side_servers(servers: Sequence[Server], side: Side) -> list[Server]:
    return [s for s in servers if serves(s, side)]


def metrics_url_of(server: Server) -> str | None:
    """Where the server's Prometheus gauges are: its ``metrics_url``, else ``/metrics`` at its base URL's root;
    None when the scenario says it has none (``metrics_url = ""``)."""
    if server.metrics_url == "":
        return None
    return server.metrics_url or origin(server.base_url) + "/metrics"


def label(server: Server) -> str:
    """How every message names a server: ``server 'p1' (prefill)``."""
    return f"server {server.name!r} ({server.role})"


def loaded_side(side: Side | None) -> Side:
    """The side a run's background loads (``background.side``); without one, the decode side, where a request
    of a few tens of tokens spends nearly all its life."""
    return side or "decode"


def named_in(text: str | None, servers: Sequence[Server]) -> Server | None:
    """The server whose address (``host:port`` of its base URL or metrics URL) ``text`` names, e.g. a router's
    ``Prefill request to http://10.0.0.5:8100 failed``; None when it names none of them (or several)."""
    if not text:
        return None
    hits = [s for s in servers if any(_address(u).search(text) for u in (s.base_url, s.metrics_url) if u)]
    return hits[0] if len(hits) == 1 else None


def _address(url: str) -> re.Pattern[str]:
    netloc = origin(url).split("://", 1)[1]
    return re.compile(re.escape(netloc) + r"(?![0-9])")  # :8100 must not match :81000


def behind_router(message: str, servers: Sequence[Server]) -> str:
    """A failure at the endpoint said as a router's: which servers stand behind it and, where the router's answer
    names one (its 500 names the prefill server that failed), that server and its role."""
    text = f"the router at endpoint.base_url, in front of {', '.join(label(s) for s in servers)}: {message}"
    hit = named_in(message, servers)
    return text + (f" (the failure is that of {label(hit)} at {hit.base_url})" if hit else "")
