"""Prometheus ``/metrics`` for the engine, with vLLM's metric names.

Why this module exists: the load tool scrapes engine gauges (running, waiting, KV usage,
prefix-cache queries and hits, prompt tokens by source, the offload tier's bytes) to put them beside each
canary, reads them by vLLM's names, and
scrapes every few tens of milliseconds while the engine is busy. So a scrape must be cheap and must
not touch live scheduler state: the engine thread takes an :class:`EngineGauges` snapshot after
each step (``EngineGauges.of``, O(running sequences)), and ``render`` only formats that snapshot,
by hand, in prometheus_client's text format (its registry machinery cost ~10x more per scrape).
Read-only: nothing here changes scheduler state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from prometheus_client.utils import floatToGoString

from loadgen.engine.kvcache import BLOCK_TOKENS
from loadgen.engine.protocol import MODEL_ID
from loadgen.engine.scheduler import Scheduler

_num: Callable[[float], str] = floatToGoString  # prometheus_client's number format (untyped upstream)
_LABELS = f'{{engine="0",model_name="{MODEL_ID}"}}'


@dataclass(frozen=True)
class EngineGauges:
    """The scheduler's gauges and counters at one instant (rendered in ``_SERIES`` order)."""

    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    prefix_queries: int = 0
    prefix_hits: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: int = 0
    local_hit: int = 0  # prompt tokens found in the prefix cache
    external: int = 0  # prompt tokens loaded from outside it (the offload tier, a handed-over KV)
    offload_store_bytes: int | None = None  # None: no offload tier (the series are not served)
    offload_load_bytes: int | None = None

    @property
    def computed(self) -> int:
        return self.prompt_tokens - self.local_hit - self.external

    @classmethod
    def of(cls, s: Scheduler, ran: int | None = None) -> EngineGauges:
        """Taken on the engine thread, between steps. ``running`` is the batch of the step just run (``ran``,
        the finished sequences included), as vLLM counts the requests of its execution batch: between
        steps the scheduler has already dropped the finished ones and not yet admitted their successors,
        a state no step ever ran."""
        cache, st = s.prefix_cache.stats, s.stats
        tier = s.offload.stats if s.offload is not None else None
        return cls(
            len(s.running) if ran is None else ran,
            len(s.waiting),
            s.kv_usage(),
            cache.queries_tokens,
            cache.hits_tokens,
            st.prompt_tokens_total,
            st.generation_tokens_total,
            st.finished_total,
            st.prompt_tokens_local_hit,
            st.prompt_tokens_external,
            None if tier is None else tier.store_bytes,
            None if tier is None else tier.load_bytes,
        )


_SERIES = {
    "running": ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches."),
    "waiting": ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed."),
    "kv_usage": ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage."),
    "prefix_queries": (
        "vllm:prefix_cache_queries_total",
        "counter",
        "Prefix cache queries, in terms of number of queried tokens.",
    ),
    "prefix_hits": (
        "vllm:prefix_cache_hits_total",
        "counter",
        "Prefix cache hits, in terms of number of cached tokens.",
    ),
    "prompt_tokens": ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed."),
    "generation_tokens": ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed."),
    "finished": ("vllm:request_success_total", "counter", "Count of successfully processed requests."),
}
# vLLM's PromptTokenStats sources: label value -> the snapshot's attribute
_BY_SOURCE = {"local_compute": "computed", "local_cache_hit": "local_hit", "external_kv_transfer": "external"}
_OFFLOAD = {  # the offloading connector's counters, served only with a tier
    "offload_store_bytes": ("vllm:kv_offload_store_bytes_total", "Total bytes stored from GPU to offload storage."),
    "offload_load_bytes": ("vllm:kv_offload_load_bytes_total", "Total bytes loaded from offload storage to GPU."),
}
# every field is rendered: by _SERIES, by source (and cached, their sum), or as an offload counter
assert [f.name for f in fields(EngineGauges)] == [*_SERIES, "local_hit", "external", *_OFFLOAD]


def _counter(name: str, doc: str, samples: list[tuple[str, float]]) -> str:
    head = f"# HELP {name} {doc}\n# TYPE {name} counter\n"
    return head + "".join(f"{name}{labels} {_num(value)}\n" for labels, value in samples)


def render(g: EngineGauges) -> bytes:
    """The text exposition of one snapshot (same bytes prometheus_client wrote for these series)."""
    out = []
    for attr, (name, kind, doc) in _SERIES.items():
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n{name}{_LABELS} {_num(getattr(g, attr))}\n")
    by_source = [
        (f'{_LABELS[:-1]},source="{source}"}}', float(getattr(g, attr))) for source, attr in _BY_SOURCE.items()
    ]
    out.append(_counter("vllm:prompt_tokens_by_source_total", "Number of prompt tokens by source.", by_source))
    cached = [(_LABELS, float(g.local_hit + g.external))]
    out.append(
        _counter("vllm:prompt_tokens_cached_total", "Number of cached prompt tokens (local + external).", cached)
    )
    for attr, (name, doc) in _OFFLOAD.items():
        value = getattr(g, attr)
        if value is not None:
            out.append(_counter(name, doc, [(_LABELS, float(value))]))
    return "".join(out).encode()


def cache_config_info(
    prefix_caching: bool, num_gpu_blocks: int, kv_offloading_size: float | None, kv_offloading_backend: str = "native"
) -> bytes:
    """vLLM's ``vllm:cache_config_info``: a gauge of 1 whose labels state the cache settings (a subset of vLLM's,
    each as vLLM writes it: ``str`` of the value, so ``"None"`` for an unset offload size)."""
    name = "vllm:cache_config_info"
    labels = (
        f'block_size="{BLOCK_TOKENS}",enable_prefix_caching="{prefix_caching}",num_gpu_blocks="{num_gpu_blocks}",'
        f'kv_offloading_size="{kv_offloading_size}",kv_offloading_backend="{kv_offloading_backend}"'
    )
    head = f"# HELP {name} Information of the LLMEngine CacheConfig\n# TYPE {name} gauge\n"
    return f"{head}{name}{{{labels}}} 1.0\n".encode()
