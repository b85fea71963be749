"""Prometheus ``/metrics`` for the engine, with vLLM's metric names.

Why this module exists: the load tool scrapes engine gauges (running, waiting, KV usage,
prefix-cache queries and hits) to put them beside each canary, and it reads them by vLLM's
names. Values are read from the scheduler at scrape time (a custom collector), so the engine
thread never touches prometheus objects. Read-only: it must not change scheduler state.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from loadgen.engine.protocol import MODEL_ID
from loadgen.engine.scheduler import Scheduler

_LABELS = ["model_name", "engine"]
_VALUES = [MODEL_ID, "0"]


class SchedulerCollector(Collector):
    def __init__(self, scheduler: Scheduler) -> None:
        self._s = scheduler

    def collect(self) -> Iterator[Metric]:
        s = self._s
        gauges = [
            ("vllm:num_requests_running", "Number of requests in model execution batches.", len(s.running)),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", len(s.waiting)),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage()),
        ]
        for name, doc, value in gauges:
            g = GaugeMetricFamily(name, doc, labels=_LABELS)
            g.add_metric(_VALUES, float(value))
            yield g
        stats = s.prefix_cache.stats
        counters = [
            (
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                stats.queries_tokens,
            ),
            ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", stats.hits_tokens),
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", s.stats.prompt_tokens_total),
            ("vllm:generation_tokens", "Number of generation tokens processed.", s.stats.generation_tokens_total),
            ("vllm:request_success", "Count of successfully processed requests.", s.stats.finished_total),
        ]
        for name, doc, value in counters:
            c = CounterMetricFamily(name, doc, labels=_LABELS)
            c.add_metric(_VALUES, float(value))
            yield c


def metrics_registry(scheduler: Scheduler) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SchedulerCollector(scheduler))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
