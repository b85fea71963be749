"""Which Prometheus series each engine uses for the batch gauges, mapped onto one small vocabulary.

Why: the report puts the engine's own running-request count beside every canary, whatever served
it. vLLM, SGLang, llama.cpp's ``llama-server`` and TGI spell the same few gauges differently; this
table is the one place that knows the spellings, read from each engine's source:

- vLLM ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``): labels ``model_name`` and
  ``engine`` (the data-parallel index). ``gpu_*`` names are the pre-0.9 spellings, kept as fallbacks.
- SGLang ``python/sglang/srt/metrics/collector.py`` (``SchedulerMetricsCollector``,
  ``TokenizerMetricsCollector``). SGLang exports a hit *rate* gauge, not hit/query counters.
- llama.cpp ``tools/server/server-task.cpp`` (``server_task_result_metrics::to_metrics``), served
  with ``--metrics``; ``kv_cache_usage_ratio`` exists only in older builds.
- TGI ``router/src/infer`` (``tgi_batch_current_size``, ``tgi_queue_size``).
- The embedded engine serves vLLM's names, so it reads as ``vllm``.

Names are *sample* names as ``prometheus_client``'s parser yields them: a counter's sample keeps
its ``_total`` suffix (the family name drops it). A series that one label splits into several quantities
(vLLM's ``prompt_tokens_by_source``, vLLM ``vllm/v1/metrics/stats.py`` ``PromptTokenStats``) is named as a
:class:`Labeled` selector: only samples whose label has that value count. The offload tier's bytes are vLLM's
offloading connector's (``vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py``). Data only: no
parsing, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

# The vocabulary every engine is mapped onto. Counters are cumulative totals since engine start.
RUNNING = "running"  # requests in the running batch (gauge)
WAITING = "waiting"  # requests queued, not yet scheduled (gauge)
KV_CACHE_USAGE = "kv_cache_usage"  # fraction of KV-cache in use, 0..1 (gauge)
PREFIX_CACHE_QUERIES = "prefix_cache_queries"  # prompt tokens looked up in the prefix cache (counter)
PREFIX_CACHE_HITS = "prefix_cache_hits"  # of those, tokens found cached (counter)
PROMPT_TOKENS_CACHED = "prompt_tokens_cached"  # prompt tokens served from cache (counter)
PREFIX_CACHE_HIT_RATE = "prefix_cache_hit_rate"  # engine-computed hit rate, 0..1 (gauge; SGLang only)
# prompt tokens by source (counters): computed here, found in the engine's own prefix cache, loaded from outside
# it (an offload tier or a prefill/decode hand-over); the three sum to the prompt tokens
TOKENS_COMPUTED = "tokens_computed"
TOKENS_LOCAL_HIT = "tokens_local_hit"
TOKENS_EXTERNAL = "tokens_external"
OFFLOAD_STORE_BYTES = "offload_store_bytes"  # bytes stored from the GPU into the offload tier (counter)
OFFLOAD_LOAD_BYTES = "offload_load_bytes"  # bytes loaded from the offload tier into the GPU (counter)

FIELDS: tuple[str, ...] = (
    RUNNING,
    WAITING,
    KV_CACHE_USAGE,
    PREFIX_CACHE_QUERIES,
    PREFIX_CACHE_HITS,
    PROMPT_TOKENS_CACHED,
    PREFIX_CACHE_HIT_RATE,
    TOKENS_COMPUTED,
    TOKENS_LOCAL_HIT,
    TOKENS_EXTERNAL,
    OFFLOAD_STORE_BYTES,
    OFFLOAD_LOAD_BYTES,
)

# Fractions are averaged over label sets (two data-parallel engines at 40% and 20% are 30% full);
# counts and counters are summed.
MEAN_FIELDS = frozenset({KV_CACHE_USAGE, PREFIX_CACHE_HIT_RATE})


@dataclass(frozen=True)
class Labeled:
    """The samples of ``name`` whose label ``label`` is ``value``: one quantity of a series a label splits."""

    name: str
    label: str
    value: str


Series = str | Labeled  # a sample name (every label set summed), or a Labeled selector (only its label value)


def _by_source(source: str) -> Labeled:
    return Labeled("vllm:prompt_tokens_by_source_total", "source", source)


@dataclass(frozen=True)
class EngineNames:
    engine: str  # the value written as ``engine``
    prefix: str  # every series of this engine starts with it (detection)
    sources: dict[str, tuple[Series, ...]]  # field -> candidate series; the first one present wins


ENGINES: tuple[EngineNames, ...] = (
    EngineNames(
        "vllm",
        "vllm:",
        {
            RUNNING: ("vllm:num_requests_running",),
            WAITING: ("vllm:num_requests_waiting",),
            KV_CACHE_USAGE: ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
            PREFIX_CACHE_QUERIES: ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
            PREFIX_CACHE_HITS: ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
            PROMPT_TOKENS_CACHED: ("vllm:prompt_tokens_cached_total",),
            TOKENS_COMPUTED: (_by_source("local_compute"),),
            TOKENS_LOCAL_HIT: (_by_source("local_cache_hit"),),
            TOKENS_EXTERNAL: (_by_source("external_kv_transfer"),),
            OFFLOAD_STORE_BYTES: (
                "vllm:kv_offload_store_bytes_total",
                Labeled("vllm:kv_offload_total_bytes_total", "transfer_type", "GPU_to_CPU"),  # the deprecated twin
            ),
            OFFLOAD_LOAD_BYTES: (
                "vllm:kv_offload_load_bytes_total",
                Labeled("vllm:kv_offload_total_bytes_total", "transfer_type", "CPU_to_GPU"),
            ),
        },
    ),
    EngineNames(
        "sglang",
        "sglang:",
        {
            RUNNING: ("sglang:num_running_reqs",),
            WAITING: ("sglang:num_queue_reqs",),
            KV_CACHE_USAGE: ("sglang:token_usage",),
            PROMPT_TOKENS_CACHED: ("sglang:cached_tokens_total",),
            PREFIX_CACHE_HIT_RATE: ("sglang:cache_hit_rate",),
        },
    ),
    EngineNames(
        "llamacpp",
        "llamacpp:",
        {
            RUNNING: ("llamacpp:requests_processing",),
            WAITING: ("llamacpp:requests_deferred",),
            KV_CACHE_USAGE: ("llamacpp:kv_cache_usage_ratio",),
            PROMPT_TOKENS_CACHED: ("llamacpp:prompt_tokens_cached_total",),
        },
    ),
    EngineNames(
        "tgi",
        "tgi_",
        {
            RUNNING: ("tgi_batch_current_size",),
            WAITING: ("tgi_queue_size",),
        },
    ),
)

WANTED: frozenset[str] = frozenset(
    s.name if isinstance(s, Labeled) else s for e in ENGINES for series in e.sources.values() for s in series
)
# sample name -> the selectors that pick some of its samples by label
LABELED: dict[str, tuple[Labeled, ...]] = {}
for _engine in ENGINES:
    for _series in _engine.sources.values():
        for _s in _series:
            if isinstance(_s, Labeled):
                LABELED[_s.name] = (*LABELED.get(_s.name, ()), _s)
