"""Scrape every server behind a prefill/decode endpoint: one ``MetricsScraper`` and one samples file per server.

Why: a router does not expose its engines' ``/metrics`` (vllm-router answers 405), so the batch each canary
shared is read from the servers themselves (docs/design.md, "Prefill/decode: servers behind one endpoint").
Each server gets its own scraper thread and its own file, ``engine_metrics-<name>.jsonl``, in the lines
``engine_metrics.jsonl`` has: a run folder from before servers reads as it did, and the reader keeps one
sorted series per server without a group-by. A server that is down, slow or answers garbage never stops the
run: its samples are gaps, and ``notices`` names it and its role. The API key goes to each server's own
metrics URL, a host the scenario configured, and no further (``collectors.metrics_client`` follows no redirect).
Must not import Locust, and must not print.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from collectors.engine_metrics import DEFAULT_INTERVAL_S, MetricsScraper
from loadgen.core.manifest import ServerScrape
from loadgen.core.scenario.schema import Server
from loadgen.core.servers import label, metrics_url_of


def samples_file(name: str) -> str:
    """The samples file of server ``name`` in a run folder (names are ``[A-Za-z0-9_.-]``: safe as file names)."""
    return f"engine_metrics-{name}.jsonl"


class ServerScrapers:
    """A scraper per server with a metrics URL; ``start`` scrapes each once, ``close`` stops them all."""

    def __init__(
        self,
        servers: Sequence[Server],
        run_dir: Path,
        *,
        api_key: str | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        timeout_s: float = 2.0,
    ) -> None:
        self.servers = list(servers)
        self.scrapers: dict[str, MetricsScraper] = {}
        for s in self.servers:
            url = metrics_url_of(s)
            if url is not None:
                path = run_dir / samples_file(s.name)
                self.scrapers[s.name] = MetricsScraper(s.base_url, path, interval_s, api_key, timeout_s, url=url)

    def start(self) -> None:
        for scraper in self.scrapers.values():
            scraper.start()

    def close(self) -> None:
        for scraper in self.scrapers.values():
            scraper.stop()  # every thread told first: the joins then overlap
        for scraper in self.scrapers.values():
            scraper.close()

    def facts(self) -> list[ServerScrape]:
        """The manifest's ``servers``: names, roles and URLs (never a key), and each scraper's summary."""
        out: list[ServerScrape] = []
        for s in self.servers:
            scraper = self.scrapers.get(s.name)
            out.append(
                {
                    "name": s.name,
                    "role": s.role,
                    "base_url": s.base_url,
                    "metrics_url": metrics_url_of(s),
                    "file": samples_file(s.name),
                    "engine_metrics": None if scraper is None else scraper.summary(),
                }
            )
        return out

    def notices(self) -> list[str]:
        """One sentence per server whose side is measured with gaps or not at all, naming it and its role."""
        out = []
        for s in self.servers:
            scraper = self.scrapers.get(s.name)
            if scraper is None:
                out.append(f"{label(s)} has no metrics_url: its side's co-residency is unmeasured.")
            elif scraper.notice:
                out.append(f"{label(s)}: {scraper.notice}: its side's co-residency is unmeasured.")
            elif scraper.failures:
                out.append(
                    f"{label(s)} at {scraper.url}: {scraper.failures} scrape(s) failed or timed out during the run "
                    f"(last: {scraper.last_error}): canaries in flight then have gaps on its side."
                )
        return out
