"""BulkStats: a fold gives Locust the same figures as logging each request, counted per second of completion."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st
from locust.stats import RequestStats, StatsEntry

from loadgen.core.record import ErrorKind
from loadgen.load.bulk_stats import BulkStats
from loadgen.load.client import Outcome

T0 = 1_767_225_600.0


def outcome(sent: float, latency: float, size: int, error: ErrorKind | None = None) -> Outcome:
    return Outcome(
        sent_at=T0 + sent,
        latency_s=latency,
        ttft_s=None,
        error_kind=error,
        error_message="boom" if error else None,
        response_bytes=size,
    )


FIELDS = ("num_requests", "num_failures", "total_content_length", "min_response_time", "max_response_time")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 30), st.floats(0, 20), st.integers(0, 10**6)), min_size=1, max_size=80),
    st.integers(1, 4),
)
def test_folds_match_logging_each_request(done: list[tuple[float, float, int]], folds: int) -> None:
    bulk, each = RequestStats(), RequestStats()
    stats = BulkStats(bulk, "background")
    for i, (sent, latency, size) in enumerate(done):
        stats.add(outcome(sent, latency, size))
        each.log_request("POST", "background", latency * 1000.0, size)  # type: ignore[arg-type]
        if i % folds == 0:
            stats.fold()
    stats.fold()
    entries: list[Callable[[RequestStats], StatsEntry]] = [lambda s: s.get("background", "POST"), lambda s: s.total]
    for entry_of in entries:
        a, b = entry_of(bulk), entry_of(each)
        assert {f: getattr(a, f) for f in FIELDS} == {f: getattr(b, f) for f in FIELDS}
        assert abs(a.total_response_time - b.total_response_time) < 1e-6 * max(1.0, b.total_response_time)
        assert a.response_times == b.response_times  # the same buckets, so the same percentiles
        assert a.num_reqs_per_sec == Counter(int(T0 + s + lat) for s, lat, _ in done)  # by completion second


def test_failures_go_in_at_once_with_their_error() -> None:
    stats = RequestStats()
    bulk = BulkStats(stats, "background")
    bulk.add(outcome(0.0, 0.5, 10, error="timeout"))
    entry = stats.get("background", "POST")
    assert entry.num_requests == 1 and entry.num_failures == 1 and stats.total.num_failures == 1
    assert [str(e.error) for e in stats.errors.values()] == ["timeout: boom"]
    assert bulk.fold() == 0  # nothing was waiting


def test_nothing_gathered_changes_nothing() -> None:
    stats = RequestStats()
    assert BulkStats(stats, "background").fold() == 0
    assert stats.total.num_requests == 0 and ("background", "POST") not in stats.entries
