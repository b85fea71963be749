"""Ask the engine how many requests it is running, to confirm a level the background holds without a sign of it.

Why: a non-streamed request gives no sign that the server has started it until its last byte, and a
server can queue requests in its front end while its engine runs fewer. So before a canary goes out
under non-streamed background, the gate reads the engine's own running count from ``/metrics`` and
waits until it reaches the level. Behind a router, the gauge is the loaded side's servers' (docs/design.md,
"Prefill/decode: servers behind one endpoint"), summed: the decode servers', or with ``background.side =
"prefill"`` the prefill servers', counting waiting as well as running requests (a prompt waits its turn
there). A server without a usable
``/metrics`` is asked once and then not again; with none left the check is skipped and the report's
measured co-residency is the only witness.
"""

from __future__ import annotations

from collectors.engine_metrics import metrics_url, parse_metrics
from collectors.metrics_client import MetricsClient
from loadgen.core.errors import EndpointError
from loadgen.core.scenario import Scenario
from loadgen.core.servers import loaded_side, metrics_url_of, side_servers

_TIMEOUT_S = 1.0


class EngineCheck:
    """The running count from ``urls`` (``/metrics`` URLs), summed; ``None`` where none of them can say."""

    def __init__(self, urls: list[str], api_key: str | None, *, queued: bool = False) -> None:
        self.urls = list(urls)
        self.queued = queued  # count waiting requests too
        # asked every 50 ms while a level is reached: one kept connection per URL
        self._clients = {u: MetricsClient(u, timeout_s=_TIMEOUT_S, api_key=api_key) for u in self.urls}

    @classmethod
    def for_run(cls, scenario: Scenario, base_url: str, api_key: str | None) -> EngineCheck:
        """The endpoint's own ``/metrics``, or the loaded side's servers' where the scenario names them."""
        servers = scenario.endpoint.servers
        if not servers:
            return cls([metrics_url(base_url)], api_key)
        side = loaded_side(scenario.background.side)
        urls = [u for s in side_servers(servers, side) if (u := metrics_url_of(s))]
        return cls(urls, api_key, queued=side == "prefill")

    def running(self) -> float | None:
        total: float | None = None
        for url in list(self.urls):
            try:
                gauges = parse_metrics(self._clients[url].fetch())
            except EndpointError:
                self.urls.remove(url)  # no /metrics, or not one we can read: never ask it again in this run
                self._clients.pop(url).close()
                continue
            if gauges["running"] is None:
                continue
            queued = (gauges["waiting"] or 0.0) if self.queued else 0.0
            total = (total or 0.0) + gauges["running"] + queued
        return total

    def confirms(self, level: int) -> bool:
        """True when the engine runs at least ``level`` requests, or cannot say."""
        running = self.running()
        return running is None or running >= level
