"""Ask the engine how many requests it is running, to confirm a level the background holds without a sign of it.

Why: a non-streamed request gives no sign that the server has started it until its last byte, and a
server can queue requests in its front end while its engine runs fewer. So before a canary goes out
under non-streamed background, the gate reads the engine's own running count from ``/metrics`` and
waits until it reaches the level. Behind a router, the gauge is the loaded side's servers' (docs/design.md,
"Prefill/decode: servers behind one endpoint"), summed: the decode servers', or with ``background.side =
"prefill"`` the prefill servers', counting waiting as well as running requests (a prompt waits its turn
there). A server without a usable
``/metrics`` is asked once and then not again; with none left the check is skipped and the report's
measured co-residency is the only witness. Each ask is bounded in all (``collectors.metrics_client``: a page
whole within twice ``_TIMEOUT_S``, and never past the gate's own settle deadline), so a server that trickles
its page cannot hold the gate; a server given up on is said in ``notices`` (the process file carries them to
the manifest) and in the log.
"""

from __future__ import annotations

import logging
import math
import time

from collectors.engine_metrics import metrics_url, parse_metrics
from collectors.metrics_client import MetricsClient
from loadgen.core.errors import EndpointError, redact
from loadgen.core.scenario import Scenario
from loadgen.core.servers import loaded_side, metrics_url_of, side_servers

_TIMEOUT_S = 1.0
log = logging.getLogger(__name__)


class EngineCheck:
    """The running count from ``urls`` (``/metrics`` URLs), summed; ``None`` where none of them can say."""

    def __init__(self, urls: list[str], api_key: str | None, *, queued: bool = False) -> None:
        self.urls = list(urls)
        self.queued = queued  # count waiting requests too
        self.notices: list[str] = []  # one per URL given up on, naming it and why
        self.cut_short = False
        self._api_key = api_key
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

    def running(self, deadline: float = math.inf) -> float | None:
        """The summed count, each URL asked within what is left until ``deadline`` (``time.monotonic()``).
        ``cut_short`` says whether that deadline came before every URL had answered."""
        total: float | None = None
        self.cut_short = False
        for url in list(self.urls):
            left = deadline - time.monotonic()
            if left <= 0:
                self.cut_short = True  # the gate's own deadline: the URLs not asked cannot say this time
                break
            try:
                gauges = parse_metrics(self._clients[url].fetch(total_s=left))
            except EndpointError as exc:
                if time.monotonic() >= deadline and left < self._clients[url].total_s:
                    self.cut_short = True  # ended by the gate's deadline, not its own: asked again next time
                    break
                self._give_up(url, str(exc))
                continue
            if gauges["running"] is None:
                continue
            queued = (gauges["waiting"] or 0.0) if self.queued else 0.0
            total = (total or 0.0) + gauges["running"] + queued
        return total

    def _give_up(self, url: str, why: str) -> None:
        """No /metrics, or not one we can read in time: never ask it again in this run, and say so."""
        self.urls.remove(url)
        self._clients.pop(url).close()
        why = redact(why.removeprefix(f"{url}: "), self._api_key)  # it may quote the server (a reason phrase)
        notice = (
            f"held-level gate: {url} not asked again in this run ({why}); a level under non-streamed "
            "background counted as held without its running count"
        )
        self.notices.append(notice)
        log.warning("%s", notice)

    def confirms(self, level: int, deadline: float = math.inf) -> bool:
        """True when the engine runs at least ``level`` requests, or cannot say; False when ``deadline``
        passed before it could."""
        running = self.running(deadline)
        if self.cut_short:
            return False
        return running is None or running >= level
