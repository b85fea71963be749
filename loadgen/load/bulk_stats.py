"""Background requests into Locust's statistics in bulk: gathered per request, folded in every few tens of ms.

Why: logging each of thousands of background requests a second through ``RequestStats.log_request``
(twice over: the named entry and the total) was one of the largest costs of the load path
(``benchmarks/generator_ceiling.py``). A fold goes through the merge Locust's own master applies to
worker reports (``StatsEntry.unserialize`` + ``extend``), so the table, charts, CSV and HTML count
the same requests with the same response-time buckets, per second of completion, one fold later.
Failed requests are logged one by one, as they come, with their error (they are rare and should
show at once). Listeners of Locust's ``request`` event do not see background requests.

Runs in a Locust process; does no I/O.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from locust.stats import RequestStats, StatsEntry, bucket_response_time

from loadgen.load.client import Outcome

METHOD = "POST"


class BulkStats:
    """One request name's successes, gathered until ``fold``; failures go straight in."""

    def __init__(self, stats: RequestStats, name: str) -> None:
        self.stats = stats
        self.name = name
        self._done: list[tuple[float, float, int]] = []  # (completed at, response time ms, bytes)

    def add(self, out: Outcome) -> None:
        latency = out.latency_s or 0.0
        if out.ok:
            self._done.append((out.sent_at + latency, latency * 1000.0, out.response_bytes))
            return
        self.stats.log_request(METHOD, self.name, latency * 1000.0, out.response_bytes)  # type: ignore[arg-type]
        self.stats.log_error(METHOD, self.name, out.failure())

    def fold(self) -> int:
        """Merge what was gathered into the named entry and the total; how many requests that was."""
        done, self._done = self._done, []
        if not done:
            return 0
        ends, ms, sizes = zip(*done, strict=True)
        report: dict[str, Any] = {
            "name": self.name,
            "method": METHOD,
            "last_request_timestamp": max(ends),
            "start_time": min(ends),
            "num_requests": len(done),
            "num_none_requests": 0,
            "num_failures": 0,
            "total_response_time": sum(ms),
            "max_response_time": max(ms),
            "min_response_time": min(ms),
            "total_content_length": sum(sizes),
            "response_times": Counter(map(bucket_response_time, ms)),
            "num_reqs_per_sec": Counter(map(int, ends)),
            "num_fail_per_sec": {},
        }
        batch = StatsEntry.unserialize(report, self.stats)  # type: ignore[arg-type]
        self.stats.get(self.name, METHOD).extend(batch)
        self.stats.total.extend(batch)
        return len(done)
