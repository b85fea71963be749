"""The ``/metrics`` scraper keeps what a failed scrape said (``notice``, ``last_error``, both written to
the manifest and shown in the reports); an endpoint that echoes the Authorization header into its reason
phrase must not get the API key into either. ``fault_server.py``'s ``/metrics`` answers a gauge once per
Authorization value, then a 503 whose reason phrase echoes the header."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.engine_metrics import MetricsScraper
from tests.loadgen.serve_app import script_server

FAULT_SERVER = Path(__file__).parents[1] / "loadgen" / "fault_server.py"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with script_server(FAULT_SERVER) as url:
        yield url


def test_a_later_failed_scrape_keeps_no_key(server: str, tmp_path: Path) -> None:
    key = f"lgtest-{uuid.uuid4().hex}"
    scraper = MetricsScraper(server, tmp_path, interval_s=0.05, api_key=key)
    assert scraper.start()  # the first scrape: a gauge
    deadline = time.monotonic() + 10
    while scraper.failures == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    scraper.close()
    summary = scraper.summary()
    assert summary["failures"] > 0 and summary["last_error"] is not None
    assert key not in str(summary) and "you sent Bearer [redacted]" in summary["last_error"]


def test_a_first_scrape_that_fails_gives_a_notice_without_the_key(server: str, tmp_path: Path) -> None:
    key = f"lgtest-{uuid.uuid4().hex}"
    with MetricsScraper(server, tmp_path, api_key=key):  # the first scrape for this key: a gauge
        pass
    scraper = MetricsScraper(server, tmp_path / "again.jsonl", api_key=key)
    assert scraper.start() is False
    assert scraper.notice is not None and key not in scraper.notice
    assert "HTTP 503 overloaded; you sent Bearer [redacted]" in scraper.notice
