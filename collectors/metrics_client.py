"""GET one ``/metrics`` URL again and again over one kept-alive connection, trusting nothing it answers.

Why: the scraper asks every 50 ms, per server behind a router; opening and closing a TCP connection for each
scrape was most of its cost on the generator's core (``benchmarks/scrape_cost.py``). ``http.client`` directly:
it follows no redirect (a 3xx is a failed scrape naming where it points: the API key never leaves the
configured host) and uses no proxy, as the probe (``loadgen.runs.probe``). A body is read up to
``MAX_BODY_BYTES``; a connection the server closed between scrapes is opened again once. Each wait for a byte
lasts at most ``timeout_s`` and the whole answer, status line and headers included, must arrive within twice
that (``loadgen.core.deadline_http``): a server that trickles its page never holds a scrape, the first one at a
run's start or the held-level gate's, longer. Every failure is an ``EndpointError`` naming the URL
(``ScrapeTimeout`` for a timeout); the caller redacts the key. Blocking; works patched by gevent or not. Must
not print.
"""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit

from loadgen.core.deadline_http import DeadlineExceeded, DeadlineHTTPConnection, DeadlineHTTPSConnection
from loadgen.core.errors import EndpointError

MAX_BODY_BYTES = 16 * 1024 * 1024
_NOT_PROMETHEUS_TYPES = ("text/html", "application/json")
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, http.client.CannotSendRequest)


class ScrapeTimeout(EndpointError):
    """A scrape that ran out of time: always counted as a gap, however short the interval was."""


class MetricsClient:
    """``fetch()`` the text at ``url``; ``close()`` when done. ``total_s``: the longest a whole scrape may take
    (default twice ``timeout_s``)."""

    def __init__(self, url: str, *, timeout_s: float, api_key: str | None = None, total_s: float | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EndpointError(f"{url}: expected an http(s) URL for /metrics")
        self.url, self.timeout_s = url, timeout_s
        self.total_s = 2 * timeout_s if total_s is None else total_s
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._headers = {"Accept": "text/plain;version=0.0.4"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._conn: DeadlineHTTPConnection | DeadlineHTTPSConnection | None = None

    def fetch(self, *, total_s: float | None = None) -> str:
        """The body as text, whole within ``total_s`` (default ``self.total_s``). Raises ``EndpointError`` naming
        the URL and what went wrong."""
        total = self.total_s if total_s is None else min(total_s, self.total_s)
        try:
            reused = self._conn is not None
            try:
                status, reason, content_type, location, body = self._get(total)
            except _STALE:
                if not reused:
                    raise
                self.close()  # the server closed the kept connection since the last scrape: once more, anew
                status, reason, content_type, location, body = self._get(total)
        except DeadlineExceeded:
            self.close()
            raise ScrapeTimeout(
                f"{self.url}: the page was still arriving after {total:g} s in all (each byte within "
                f"{self.timeout_s:g} s): the server trickles it"
            ) from None
        except TimeoutError:
            self.close()
            raise ScrapeTimeout(f"{self.url}: timed out after {self.timeout_s:g} s") from None
        except http.client.HTTPException as exc:
            self.close()
            raise EndpointError(f"{self.url}: {type(exc).__name__}: {exc}") from None
        except OSError as exc:
            self.close()
            raise EndpointError(f"{self.url}: {exc}") from None
        if 300 <= status < 400:
            raise EndpointError(f"{self.url}: HTTP {status} redirect to {location}, not followed (the key stays here)")
        if status != 200:
            raise EndpointError(f"{self.url}: HTTP {status} {reason}")
        if content_type.lower().startswith(_NOT_PROMETHEUS_TYPES):
            raise EndpointError(f"{self.url}: Content-Type {content_type}, not Prometheus text")
        return body.decode("utf-8", errors="replace")

    def _get(self, total_s: float) -> tuple[int, str, str, str | None, bytes]:
        if self._conn is None:
            kind = DeadlineHTTPSConnection if self._https else DeadlineHTTPConnection
            self._conn = kind(self._host, self._port, timeout=self.timeout_s)
        self._conn.expect_by(total_s)
        self._conn.request("GET", self._path, headers=self._headers)
        response = self._conn.getresponse()
        body = response.read(MAX_BODY_BYTES)
        if not response.isclosed():  # more than the most we read: this connection cannot be reused
            self.close()
        return (
            response.status,
            response.reason,
            response.getheader("Content-Type", ""),
            response.getheader("Location"),
            body,
        )

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
