"""Engine metrics: scrape the endpoint's Prometheus ``/metrics`` through a run and join it to canaries.

Why: the concurrency level is what this generator asked for; the engine's own running-request gauge
is the batch the canary actually shared. This module reads that gauge (and waiting, KV-cache usage,
prefix-cache counters) from vLLM, SGLang, llama.cpp, TGI or the embedded engine and writes one line
per scrape to ``engine_metrics.jsonl``; the report joins every sample taken while a canary was in
flight to it (``collectors.read.coresidency.window_running``).

Three parts: ``parse_metrics`` (pure: Prometheus text in, one small vocabulary out, parsed by
``prometheus_client``'s parser), ``MetricsScraper`` (I/O: a background thread, which becomes a
greenlet under gevent's monkey-patching, so it runs in a Locust process and outside one), and
``nearest_running`` (pure: the older nearest-sample join, kept for tools that call it). An endpoint
without ``/metrics`` is a notice, never an exception. Must not import Locust, and must not print.
"""

from __future__ import annotations

import math
import re
import threading
import time
from functools import lru_cache
from pathlib import Path
from types import TracebackType
from typing import TypedDict
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt
from prometheus_client.parser import text_string_to_metric_families

from collectors.jsonl import JsonlWriter
from collectors.metrics_client import MetricsClient, ScrapeTimeout

__all__ = ["MetricsScraper", "ScrapeTimeout", "metrics_url", "nearest_running", "parse_metrics"]
from collectors.metric_names import (
    ENGINES,
    FIELDS,
    KV_CACHE_USAGE,
    LABELED,
    MEAN_FIELDS,
    OFFLOAD_LOAD_BYTES,
    OFFLOAD_STORE_BYTES,
    PREFIX_CACHE_HIT_RATE,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    PROMPT_TOKENS_CACHED,
    RUNNING,
    TOKENS_COMPUTED,
    TOKENS_EXTERNAL,
    TOKENS_LOCAL_HIT,
    WAITING,
    WANTED,
    Series,
)
from loadgen.core.errors import EndpointError, RunFolderError, UsageError, redact
from loadgen.core.manifest import EngineMetricsSummary

ENGINE_METRICS_FILE = "engine_metrics.jsonl"
# HELP/TYPE lines may name a counter with or without its ``_total`` suffix.
_KEEP = WANTED | {n.removesuffix("_total") for n in WANTED}
_PREFIXES = tuple(e.prefix for e in ENGINES)
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")  # a name check only: values are prometheus_client's

Floats = npt.NDArray[np.float64]
DEFAULT_INTERVAL_S = 0.05
GAP_FACTOR = 4.0  # an interval between samples longer than this many nominal intervals is a gap


class EngineGauges(TypedDict):
    """One scrape, in the shared vocabulary. ``None``: the engine does not expose it (never 0)."""

    engine: str  # "vllm", "sglang", "llamacpp", "tgi" or "unknown"
    running: float | None
    waiting: float | None
    kv_cache_usage: float | None
    prefix_cache_queries: float | None
    prefix_cache_hits: float | None
    prompt_tokens_cached: float | None
    prefix_cache_hit_rate: float | None
    tokens_computed: float | None  # prompt tokens by source (vLLM's prompt_tokens_by_source)
    tokens_local_hit: float | None
    tokens_external: float | None
    offload_store_bytes: float | None  # the offload tier's counters (vLLM's kv_offload_*_bytes)
    offload_load_bytes: float | None


@lru_cache(maxsize=4096)
def _verdict(name: str) -> str | None:
    """What a series name means for ``_relevant_lines``: ``""`` keep its lines (a gauge we read, or no metric name
    at all: the parser must see it to reject it), an engine prefix it starts with, or None (drop). Cached: an
    exposition repeats a few hundred names in every scrape (a histogram's buckets share one), and the cache is
    bounded whatever names a server sends."""
    if name in _KEEP or not _METRIC_NAME.fullmatch(name):
        return ""
    return next((p for p in _PREFIXES if name.startswith(p)), None)


def _relevant_lines(text: str) -> tuple[str, set[str]]:
    """Lines about the gauges we keep (plus any line that is not Prometheus at all, so that the parser
    rejects it), and the engine prefixes seen. Selecting lines keeps a 100 KB vLLM exposition from
    costing tens of milliseconds a scrape inside a gevent process; parsing stays prometheus_client's.
    A line's name: a HELP/TYPE comment's third word, a sample's text before ``{`` or a blank; other comments
    name none. With a scrape per server every 50 ms on the generator's core (docs/design.md, "Prefill/decode:
    servers behind one endpoint") this loop is the cost: no call per line but the cached ``_verdict``."""
    kept: list[str] = []
    prefixes: set[str] = set()
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(None, 3)
            if len(parts) < 3 or parts[1] not in ("HELP", "TYPE"):
                continue
            name = parts[2]
        else:
            name = "" if line[0] == "{" else line.split("{", 1)[0].split(None, 1)[0]
        verdict = _verdict(name)
        if verdict == "":
            kept.append(line)
        elif verdict:
            prefixes.add(verdict)
    prefixes.update(p for p in _PREFIXES if any(line.startswith(p) for line in kept))
    return "\n".join(kept) + "\n", prefixes


def _aggregate(values: list[float], mean: bool) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return None
    return sum(finite) / len(finite) if mean else float(sum(finite))


def parse_metrics(text: str) -> EngineGauges:
    """Map one ``/metrics`` body onto the shared vocabulary, summing over label sets (fractions are
    averaged); a ``Labeled`` series sums only the label sets with its label value (the prompt tokens of one
    source, never of all three). Raises ``EndpointError`` when the text is not Prometheus exposition format."""
    relevant, prefixes = _relevant_lines(text)
    found: dict[Series, list[float]] = {}
    try:
        for family in text_string_to_metric_families(relevant):
            for sample in family.samples:
                if sample.name in WANTED:
                    found.setdefault(sample.name, []).append(float(sample.value))
                for selector in LABELED.get(sample.name, ()):
                    if sample.labels.get(selector.label) == selector.value:
                        found.setdefault(selector, []).append(float(sample.value))
    except (ValueError, IndexError) as exc:
        raise EndpointError(f"not Prometheus text exposition format ({exc})") from None
    engine = next((e for e in ENGINES if any(n in found for ns in e.sources.values() for n in ns)), None)
    if engine is None:
        engine = next((e for e in ENGINES if e.prefix in prefixes), None)
    v: dict[str, float | None] = {}
    for field in FIELDS:
        names = engine.sources.get(field, ()) if engine else ()
        name = next((n for n in names if n in found), None)
        v[field] = None if name is None else _aggregate(found[name], field in MEAN_FIELDS)
    return EngineGauges(
        engine=engine.engine if engine else "unknown",
        running=v[RUNNING],
        waiting=v[WAITING],
        kv_cache_usage=v[KV_CACHE_USAGE],
        prefix_cache_queries=v[PREFIX_CACHE_QUERIES],
        prefix_cache_hits=v[PREFIX_CACHE_HITS],
        prompt_tokens_cached=v[PROMPT_TOKENS_CACHED],
        prefix_cache_hit_rate=v[PREFIX_CACHE_HIT_RATE],
        tokens_computed=v[TOKENS_COMPUTED],
        tokens_local_hit=v[TOKENS_LOCAL_HIT],
        tokens_external=v[TOKENS_EXTERNAL],
        offload_store_bytes=v[OFFLOAD_STORE_BYTES],
        offload_load_bytes=v[OFFLOAD_LOAD_BYTES],
    )


def metrics_url(base_url: str) -> str:
    """``http://h:8000/v1`` -> ``http://h:8000/metrics``: engines serve ``/metrics`` at the server root."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise EndpointError(f"{base_url}: expected an http(s) URL to derive /metrics from")
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/metrics"  # no credentials: notices print it


class MetricsScraper:
    """Scrapes ``<origin>/metrics`` every ``interval_s`` and appends ``{"t": epoch_s, **gauges}`` lines.

    ``start()`` scrapes once in the caller (it decides ``available``) and then keeps scraping in a
    daemon thread until ``stop()``/``close()``. An endpoint that answers the first scrape with an
    error, non-Prometheus text or none of the known gauges is left alone: ``available`` is False and
    ``notice`` says why, naming the URL. Later failures are counted (``failures``, ``last_error``)
    and leave a gap in the file, never a made-up value. ``t`` is the midpoint of the request.
    ``out_path`` is the JSONL file, or a run folder that receives ``engine_metrics.jsonl``; the file
    is created by the first sample, so an endpoint without metrics leaves none.

    Cost is bounded at any interval: one scrape at a time, and after each one the thread sleeps only
    what is left of the interval (nothing when the scrape took longer), so a slow endpoint lowers
    the rate and never builds a backlog. Gaps are recorded: ``max_gap_s`` is the largest interval
    between consecutive samples (the stretch from the last sample to ``stop()`` included), ``gaps``
    counts intervals longer than ``GAP_FACTOR`` nominal intervals or holding a timed-out scrape.
    """

    def __init__(
        self,
        base_url: str,
        out_path: Path,
        interval_s: float = DEFAULT_INTERVAL_S,
        api_key: str | None = None,
        timeout_s: float = 2.0,
        *,
        url: str | None = None,
    ) -> None:
        """``url``: the metrics URL itself (a server's ``metrics_url``); else ``/metrics`` at ``base_url``'s root."""
        if not interval_s > 0:
            raise UsageError(f"engine metrics interval_s: expected a positive number of seconds, got {interval_s!r}")
        self.url = url or metrics_url(base_url)
        self.path = out_path / ENGINE_METRICS_FILE if out_path.is_dir() else out_path
        self.interval_s = float(interval_s)
        self.timeout_s = float(timeout_s)
        self.api_key = api_key
        self._client = MetricsClient(self.url, timeout_s=self.timeout_s, api_key=api_key)  # one kept connection
        self.available: bool | None = None  # None until the first scrape
        self.notice: str | None = None
        self.engine: str | None = None
        self.failures = 0
        self.last_error: str | None = None
        self.max_gap_s: float | None = None  # None until a second sample (or the stop) closes an interval
        self.gaps = 0
        self._last_t: float | None = None  # time of the last sample written
        self._timed_out = False  # a scrape timed out since the last sample
        self._tail_closed = False
        self._started_at = 0.0  # monotonic start of the latest scrape
        self._writer: JsonlWriter | None = None
        self._write_lock = threading.Lock()  # close() never races a write from a scrape that overran stop()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def samples(self) -> int:
        return self._writer.written if self._writer else 0

    @property
    def write_failures(self) -> int:
        return self._writer.failures if self._writer else 0

    def start(self) -> bool:
        """Scrape once now; if the endpoint has usable metrics, keep scraping in the background."""
        if self.available is not None:
            return self.available
        self._started_at = time.monotonic()
        try:
            t, gauges = self._scrape()
        except EndpointError as exc:
            return self._unavailable(str(exc).removeprefix(f"{self.url}: "))
        if gauges["engine"] == "unknown":
            return self._unavailable("none of the vLLM, SGLang, llama.cpp or TGI batch gauges")
        self._write(t, gauges)
        self.available, self.engine = True, gauges["engine"]
        self._thread = threading.Thread(target=self._loop, name="engine-metrics", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._client.total_s + self.interval_s + 1.0)  # a scrape's most, and a sleep
        with self._write_lock:
            if self._last_t is not None and not self._tail_closed:  # the stretch since the last sample
                self._tail_closed = True
                self._interval(time.time() - self._last_t)

    def close(self) -> None:
        self.stop()
        self._client.close()
        with self._write_lock:
            if self._writer is not None:
                self._writer.close()

    def summary(self) -> EngineMetricsSummary:
        """Plain facts for the manifest."""
        return {
            "url": self.url,
            "available": self.available,
            "notice": self.notice,
            "engine": self.engine,
            "interval_s": self.interval_s,
            "samples": self.samples,
            "failures": self.failures,
            "last_error": self.last_error,
            "write_failures": self.write_failures,
            "max_gap_s": self.max_gap_s,
            "gaps": self.gaps,
        }

    def __enter__(self) -> MetricsScraper:
        self.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _unavailable(self, reason: str) -> bool:
        self.available = False
        # the reason quotes the server (a reason phrase, a Content-Type) and is kept in the manifest
        self.notice = redact(f"{self.url}: no Prometheus /metrics ({reason})", self.api_key)
        return False

    def _scrape(self) -> tuple[float, EngineGauges]:
        t0 = time.time()
        text = self._client.fetch()
        t1 = time.time()
        try:
            return (t0 + t1) / 2, parse_metrics(text)
        except EndpointError as exc:
            raise EndpointError(f"{self.url}: {exc}") from None

    def _write(self, t: float, gauges: EngineGauges) -> None:
        with self._write_lock:
            if self._stop.is_set():
                return
            if self._writer is None:  # the first sample, written from start(): an error reaches the caller
                try:
                    self._writer = JsonlWriter(self.path)
                except OSError as exc:
                    raise RunFolderError(f"{self.path}: cannot open for engine metrics ({exc})") from None
            self._writer.write({"t": t, **gauges})
            if self._last_t is not None:
                self._interval(t - self._last_t)
            self._last_t = t

    def _interval(self, gap: float) -> None:
        """Account for one interval between samples (under the write lock)."""
        gap = max(0.0, gap)
        self.max_gap_s = gap if self.max_gap_s is None else max(self.max_gap_s, gap)
        if self._timed_out or gap > GAP_FACTOR * self.interval_s:
            self.gaps += 1
        self._timed_out = False

    def _loop(self) -> None:
        # one scrape at a time; sleep only what is left of the interval since the last one started
        while not self._stop.wait(max(0.0, self._started_at + self.interval_s - time.monotonic())):
            self._started_at = time.monotonic()
            try:
                t, gauges = self._scrape()
            except EndpointError as exc:
                self.failures += 1
                self.last_error = redact(str(exc), self.api_key)  # quotes the server; kept in the manifest
                if isinstance(exc, ScrapeTimeout):
                    self._timed_out = True
            else:
                self._write(t, gauges)


def nearest_running(sent_at: Floats, t: Floats, running: Floats, max_gap_s: float = 1.0) -> Floats:
    """For each send time, the running count of the sample nearest in time (the earlier one wins a
    tie); NaN where no sample with a finite count lies within ``max_gap_s``. Samples need not be
    sorted; samples whose count is NaN are ignored rather than returned as the nearest."""
    sent = np.asarray(sent_at, dtype=np.float64)
    ts = np.asarray(t, dtype=np.float64)
    vals = np.asarray(running, dtype=np.float64)
    out = np.full(sent.shape, np.nan)
    keep = np.isfinite(ts) & np.isfinite(vals)
    if not keep.any():
        return out
    order = np.argsort(ts[keep], kind="stable")
    ts, vals = ts[keep][order], vals[keep][order]
    right = np.clip(np.searchsorted(ts, sent, side="left"), 0, len(ts) - 1)
    left = np.clip(right - 1, 0, len(ts) - 1)
    with np.errstate(invalid="ignore"):
        pick = np.where(np.abs(sent - ts[left]) <= np.abs(ts[right] - sent), left, right)
        near = np.abs(ts[pick] - sent) <= max_gap_s
    out[near] = vals[pick[near]]
    return out
