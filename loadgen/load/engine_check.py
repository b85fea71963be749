"""Ask the engine how many requests it is running, to confirm a level held by non-streamed background.

Why: a non-streamed request gives no sign that the server has started it until its last byte, and a
server can queue requests in its front end while its engine runs fewer. So before a canary goes out
under non-streamed background, the gate reads the engine's own running count from ``/metrics`` and
waits until it reaches the level. An endpoint without a usable ``/metrics`` is asked once and then
not again: the check is skipped and the report's measured co-residency is the only witness.
"""

from __future__ import annotations

from collectors.engine_metrics import fetch_metrics_text, metrics_url, parse_metrics
from loadgen.core.errors import EndpointError

_TIMEOUT_S = 1.0


class EngineCheck:
    """The running count from ``<origin>/metrics``; ``None`` where the endpoint cannot say."""

    def __init__(self, base_url: str, api_key: str | None) -> None:
        self.url: str | None = metrics_url(base_url)
        self.api_key = api_key

    def running(self) -> float | None:
        if self.url is None:
            return None
        try:
            return parse_metrics(fetch_metrics_text(self.url, timeout_s=_TIMEOUT_S, api_key=self.api_key))["running"]
        except EndpointError:
            self.url = None  # no /metrics, or not one we can read: never ask again in this run
            return None

    def confirms(self, level: int) -> bool:
        """True when the engine runs at least ``level`` requests, or cannot say."""
        running = self.running()
        return running is None or running >= level
