"""Engine metrics: parsing real-shaped /metrics texts, scraping real local servers, and the nearest-sample join."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from collectors.engine_metrics import (
    ENGINE_METRICS_FILE,
    MetricsScraper,
    metrics_url,
    nearest_running,
    parse_metrics,
)
from collectors.jsonl import read_jsonl
from collectors.read.coresidency import window_running
from loadgen.core.errors import EndpointError, RunFolderError, UsageError
from loadgen.launchers.process import start_embedded

FIXTURES = Path(__file__).with_name("fixtures")


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# ---------------------------------------------------------------- parsing


def test_vllm_two_engines_are_summed_and_usage_averaged() -> None:
    g = parse_metrics(fixture("vllm_metrics.txt"))
    assert g == {
        "engine": "vllm",
        "running": 12.0,  # 7 + 5
        "waiting": 3.0,  # 3 + 0
        "kv_cache_usage": 0.28125,  # mean of 0.4375 and 0.125: a fraction is not summed
        "prefix_cache_queries": 14336.0,  # 10240 + 4096, read from the _total sample
        "prefix_cache_hits": 7168.0,
        "prompt_tokens_cached": 7168.0,
        "prefix_cache_hit_rate": None,
        "tokens_computed": 7168.0,  # 4096 + 3072: source="local_compute" of both engines, never the other sources
        "tokens_local_hit": 7168.0,  # 6144 + 1024
        "tokens_external": 0.0,  # served and zero: not None
        "offload_store_bytes": None,  # no offload connector: no series
        "offload_load_bytes": None,
    }


def test_sglang() -> None:
    assert parse_metrics(fixture("sglang_metrics.txt")) == {
        "engine": "sglang",
        "running": 9.0,
        "waiting": 4.0,
        "kv_cache_usage": 0.28,
        "prefix_cache_queries": None,  # SGLang has no query/hit counters, only a rate
        "prefix_cache_hits": None,
        "prompt_tokens_cached": 3048338.0,
        "prefix_cache_hit_rate": 0.375,
        "tokens_computed": None,
        "tokens_local_hit": None,
        "tokens_external": None,
        "offload_store_bytes": None,
        "offload_load_bytes": None,
    }


def test_llamacpp_current() -> None:
    assert parse_metrics(fixture("llamacpp_metrics.txt")) == {
        "engine": "llamacpp",
        "running": 3.0,
        "waiting": 2.0,
        "kv_cache_usage": None,  # current llama-server exports no KV usage gauge
        "prefix_cache_queries": None,
        "prefix_cache_hits": None,
        "prompt_tokens_cached": 4096.0,
        "prefix_cache_hit_rate": None,
        "tokens_computed": None,
        "tokens_local_hit": None,
        "tokens_external": None,
        "offload_store_bytes": None,
        "offload_load_bytes": None,
    }


def test_llamacpp_older_build_has_kv_ratio_and_no_cached_counter() -> None:
    g = parse_metrics(fixture("llamacpp_older_metrics.txt"))
    assert (g["engine"], g["running"], g["waiting"], g["kv_cache_usage"]) == ("llamacpp", 1.0, 0.0, 0.25)
    assert g["waiting"] == 0.0 and g["waiting"] is not None  # a real zero stays zero
    assert g["prompt_tokens_cached"] is None


def test_label_sets_are_summed_across_models_and_engines() -> None:
    text = textwrap.dedent(
        """\
        # HELP vllm:num_requests_running Number of requests in model execution batches.
        # TYPE vllm:num_requests_running gauge
        vllm:num_requests_running{engine="0",model_name="a"} 2.0
        vllm:num_requests_running{engine="1",model_name="a"} 3.0
        vllm:num_requests_running{engine="0",model_name="b b"} 4.0
        # TYPE vllm:gpu_cache_usage_perc gauge
        vllm:gpu_cache_usage_perc{engine="0",model_name="a"} 0.5
        vllm:gpu_cache_usage_perc{engine="1",model_name="a"} 0.25
        # TYPE vllm:gpu_prefix_cache_hits_total counter
        vllm:gpu_prefix_cache_hits_total{engine="0",model_name="a"} 10
        vllm:gpu_prefix_cache_hits_total{engine="1",model_name="a"} 1e1
        """
    )
    g = parse_metrics(text)
    assert g["running"] == 9.0
    assert g["kv_cache_usage"] == 0.375  # pre-0.9 name, still read
    assert g["prefix_cache_hits"] == 20.0
    assert g["waiting"] is None and g["prefix_cache_queries"] is None


def test_prompt_tokens_by_source_are_summed_per_source_and_offload_bytes_by_either_name() -> None:
    """vLLM's offloading connector: the current counters, else their deprecated twin split by transfer_type."""
    by_source = textwrap.dedent(
        """\
        # TYPE vllm:prompt_tokens_by_source_total counter
        vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} 5
        vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_cache_hit"} 16
        vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="external_kv_transfer"} 64
        vllm:prompt_tokens_by_source_total{engine="1",model_name="m",source="external_kv_transfer"} 32
        """
    )
    current = textwrap.dedent(
        """\
        # TYPE vllm:kv_offload_store_bytes_total counter
        vllm:kv_offload_store_bytes_total{engine="0",model_name="m"} 1000
        # TYPE vllm:kv_offload_load_bytes_total counter
        vllm:kv_offload_load_bytes_total{engine="0",model_name="m"} 300
        """
    )
    deprecated = textwrap.dedent(
        """\
        # TYPE vllm:kv_offload_total_bytes_total counter
        vllm:kv_offload_total_bytes_total{engine="0",model_name="m",transfer_type="GPU_to_CPU"} 1000
        vllm:kv_offload_total_bytes_total{engine="0",model_name="m",transfer_type="CPU_to_GPU"} 300
        """
    )
    g = parse_metrics(by_source)
    assert (g["engine"], g["tokens_computed"], g["tokens_local_hit"], g["tokens_external"]) == ("vllm", 5, 16, 96)
    assert g["offload_store_bytes"] is None and g["offload_load_bytes"] is None
    for text in (current, deprecated):
        g = parse_metrics(by_source + text)
        assert (g["offload_store_bytes"], g["offload_load_bytes"]) == (1000, 300)


def test_missing_or_nan_gauges_are_none_never_zero() -> None:
    text = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 5\nvllm:num_requests_waiting NaN\n"
    g = parse_metrics(text)
    assert g["engine"] == "vllm" and g["running"] == 5.0
    assert all(g[k] is None for k in g if k not in ("engine", "running"))  # type: ignore[literal-required]


def test_tgi_without_help_lines() -> None:
    text = "# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 4\n"
    text += "# TYPE tgi_queue_size gauge\ntgi_queue_size 1\n"
    g = parse_metrics(text)
    assert (g["engine"], g["running"], g["waiting"], g["kv_cache_usage"]) == ("tgi", 4.0, 1.0, None)


def test_other_prometheus_text_is_engine_unknown() -> None:
    text = "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n"
    g = parse_metrics(text)
    assert g["engine"] == "unknown" and g["running"] is None
    # An engine prefix with none of the gauges we keep still names the engine.
    assert parse_metrics("vllm:some_future_gauge 1\n")["engine"] == "vllm"


@pytest.mark.parametrize(
    "body",
    ["<html><body>Not Found</body></html>", '{"detail":"Not Found"}', "vllm:num_requests_running seven\n"],
)
def test_non_prometheus_text_is_an_endpoint_error(body: str) -> None:
    with pytest.raises(EndpointError, match="not Prometheus"):
        parse_metrics(body)


def test_interval_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="interval_s"):
        MetricsScraper("http://h:1", tmp_path, interval_s=0)


def test_metrics_url_is_at_the_origin() -> None:
    assert metrics_url("http://h:8000/v1") == "http://h:8000/metrics"
    assert metrics_url("https://u:p@h/openai/v1/") == "https://h/metrics"  # never echo credentials
    with pytest.raises(EndpointError, match="ftp://h"):
        metrics_url("ftp://h/x")


# ---------------------------------------------------------------- scraping real servers


@dataclass
class Served:
    body: str = ""
    status: int = 200
    content_type: str = "text/plain; version=0.0.4; charset=utf-8"
    paths: list[str] = field(default_factory=list)
    auth: list[str | None] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    delay_s: float = 0.0  # how long each answer takes
    inflight: int = 0
    max_inflight: int = 0  # the most requests it was answering at once
    times: list[float] = field(default_factory=list)  # when each request arrived (time.monotonic)


@contextmanager
def metrics_server(served: Served) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1:0 answering every GET from ``served``; yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with served.lock:
                served.paths.append(self.path)
                served.auth.append(self.headers.get("Authorization"))
                served.times.append(time.monotonic())
                served.inflight += 1
                served.max_inflight = max(served.max_inflight, served.inflight)
                status, body, ctype, delay = served.status, served.body.encode(), served.content_type, served.delay_s
            answering = True
            try:
                if delay:
                    time.sleep(delay)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                # counted as over before its last bytes go: the client cannot start its next scrape before
                # it has them, so a next request seen now overlaps this one, and none after the write races
                # this thread's own bookkeeping
                with served.lock:
                    served.inflight -= 1
                answering = False
                self.wfile.write(body)
            except OSError:  # the client gave up (a timeout test)
                pass
            finally:
                if answering:
                    with served.lock:
                        served.inflight -= 1

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_scrapes_at_roughly_the_interval_until_closed(tmp_path: Path) -> None:
    served = Served(body=fixture("vllm_metrics.txt"))
    with metrics_server(served) as url:
        scraper = MetricsScraper(url + "/v1", tmp_path, interval_s=0.05, api_key="sk-test")
        t_start = time.time()
        assert scraper.start() is True and scraper.available is True and scraper.engine == "vllm"
        time.sleep(0.6)
        scraper.close()
        t_end = time.time()
        n_closed = scraper.samples
        time.sleep(0.15)
    rows = read_jsonl(tmp_path / ENGINE_METRICS_FILE).rows
    assert len(rows) == n_closed == scraper.samples  # nothing written after close()
    assert 6 <= len(rows) <= 16, len(rows)  # 0.6 s / 0.05 s = 12, with slack for a busy 2-core box
    ts = np.array([r["t"] for r in rows])
    assert t_start <= ts[0] and ts[-1] <= t_end and bool(np.all(np.diff(ts) > 0))
    assert 0.03 <= float(np.median(np.diff(ts))) <= 0.08
    assert all(r["running"] == 12.0 and r["engine"] == "vllm" for r in rows)
    assert set(served.paths) == {"/metrics"}  # at the server root, not under /v1
    assert set(served.auth) == {"Bearer sk-test"}
    assert scraper.failures == 0 and scraper.notice is None


def test_default_interval_is_50_ms_and_a_steady_scrape_records_no_gap(tmp_path: Path) -> None:
    assert MetricsScraper("http://h:1", tmp_path).interval_s == 0.05
    with metrics_server(Served(body=fixture("vllm_metrics.txt"))) as url:
        scraper = MetricsScraper(url, tmp_path, interval_s=0.1)  # a 0.4 s gap threshold: robust on a busy box
        assert scraper.start() is True
        time.sleep(0.5)
        scraper.close()
    summary = scraper.summary()
    assert summary["gaps"] == 0 and summary["interval_s"] == 0.1
    assert summary["max_gap_s"] is not None and 0.05 <= summary["max_gap_s"] < 0.4
    assert set(summary) >= {"url", "available", "notice", "engine", "samples", "failures", "last_error"}


def test_slow_endpoint_lowers_the_rate_one_scrape_at_a_time_without_backlog(tmp_path: Path) -> None:
    served = Served(body=fixture("vllm_metrics.txt"), delay_s=0.12)
    with metrics_server(served) as url:
        scraper = MetricsScraper(url, tmp_path, interval_s=0.02)
        assert scraper.start() is True
        time.sleep(0.8)
        scraper.close()
    assert served.max_inflight == 1  # one scrape at a time, never a pile of overlapping requests
    starts = np.diff(np.array(served.times))
    assert len(served.times) <= 0.8 / 0.12 + 3  # the rate the endpoint allows, not 40 a second
    assert float(starts.min()) >= 0.1  # the next scrape starts when the last one is done, with no burst
    rows = read_jsonl(tmp_path / ENGINE_METRICS_FILE).rows
    assert len(rows) == scraper.samples >= 4
    assert scraper.gaps >= 1  # 0.12 s between samples is over 4 x 0.02 s: each slow interval is a gap
    assert scraper.max_gap_s is not None and scraper.max_gap_s >= 0.1


def test_a_stalled_endpoint_is_a_gap_and_a_timeout_counts(tmp_path: Path) -> None:
    served = Served(body=fixture("vllm_metrics.txt"))
    with metrics_server(served) as url:
        scraper = MetricsScraper(url, tmp_path, interval_s=0.05, timeout_s=0.3)
        assert scraper.start() is True
        time.sleep(0.3)
        with served.lock:
            served.delay_s = 0.6  # longer than the timeout
        time.sleep(0.5)
        with served.lock:
            served.delay_s = 0.0
        time.sleep(0.6)
        scraper.close()
    s = scraper.summary()
    assert s["failures"] >= 1 and s["last_error"] is not None and "timed out" in s["last_error"]
    assert s["gaps"] >= 1
    ts = np.array([r["t"] for r in read_jsonl(tmp_path / ENGINE_METRICS_FILE).rows])
    assert s["max_gap_s"] is not None and s["max_gap_s"] >= 0.3
    assert s["max_gap_s"] == pytest.approx(float(np.diff(ts).max()), abs=0.01)


def test_endpoint_without_metrics_is_a_notice(tmp_path: Path) -> None:
    with metrics_server(Served(body="Not Found", status=404)) as url:
        scraper = MetricsScraper(url, tmp_path)
        assert scraper.start() is False
        scraper.close()
    assert scraper.available is False
    assert scraper.notice is not None and scraper.notice.startswith(f"{url}/metrics: no Prometheus /metrics (")
    assert "404" in scraper.notice
    assert not (tmp_path / ENGINE_METRICS_FILE).exists() and scraper.samples == 0


def test_unwritable_output_is_an_error_at_start(tmp_path: Path) -> None:
    with metrics_server(Served(body=fixture("vllm_metrics.txt"))) as url:
        scraper = MetricsScraper(url, tmp_path / "missing" / "em.jsonl")
        with pytest.raises(RunFolderError, match=r"missing/em\.jsonl"):
            scraper.start()
        scraper.close()
    assert scraper.available is None and scraper.samples == 0


def test_connection_refused_is_a_notice(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    scraper = MetricsScraper(f"http://127.0.0.1:{port}/v1", tmp_path / "em.jsonl", timeout_s=1.0)
    assert scraper.start() is False
    assert scraper.notice is not None and f"http://127.0.0.1:{port}/metrics" in scraper.notice
    assert "refused" in scraper.notice.lower()
    assert not (tmp_path / "em.jsonl").exists()


@pytest.mark.parametrize(
    ("body", "ctype", "reason"),
    [
        ("<!doctype html><title>app</title>", "text/html; charset=utf-8", "Content-Type text/html"),
        ("<!doctype html><title>app</title>", "text/plain", "not Prometheus"),
        ("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n", "text/plain", "none of the"),
    ],
)
def test_page_that_is_not_engine_metrics_is_a_notice(tmp_path: Path, body: str, ctype: str, reason: str) -> None:
    with metrics_server(Served(body=body, content_type=ctype)) as url:
        scraper = MetricsScraper(url, tmp_path)
        assert scraper.start() is False
    assert scraper.notice is not None and reason in scraper.notice and url in scraper.notice


def test_failures_after_start_are_counted_and_leave_a_gap(tmp_path: Path) -> None:
    served = Served(body=fixture("llamacpp_metrics.txt"))
    with metrics_server(served) as url:
        scraper = MetricsScraper(url, tmp_path, interval_s=0.04)
        assert scraper.start() is True and scraper.engine == "llamacpp"
        time.sleep(0.2)
        with served.lock:
            served.status, served.body = 500, "boom"
        time.sleep(0.1)  # let any scrape already in flight finish
        before = scraper.samples
        time.sleep(0.25)
        after = scraper.samples
        scraper.close()
    assert before >= 2 and after == before
    assert scraper.failures >= 3
    assert scraper.last_error is not None and "HTTP 500" in scraper.last_error and url in scraper.last_error
    assert scraper.available is True and scraper.notice is None


def test_scraper_runs_as_a_greenlet_under_gevent(tmp_path: Path) -> None:
    """Locust processes are monkey-patched: the scraper's thread is then a greenlet and must still tick."""
    out = tmp_path / "em.jsonl"
    script = textwrap.dedent(
        """
        from gevent import monkey
        monkey.patch_all()
        import sys, threading, gevent
        from pathlib import Path
        from collectors.engine_metrics import MetricsScraper
        assert threading.Thread.__module__.startswith("gevent")
        s = MetricsScraper(sys.argv[1], Path(sys.argv[2]), interval_s=0.05)
        assert s.start()
        gevent.sleep(0.5)
        s.close()
        print(s.samples)
        """
    )
    with metrics_server(Served(body=fixture("sglang_metrics.txt"))) as url:
        proc = subprocess.run(
            [sys.executable, "-c", script, url, str(out)], capture_output=True, text=True, timeout=60, env=os.environ
        )
    assert proc.returncode == 0, proc.stderr
    n = int(proc.stdout.strip())
    assert n >= 5 and len(read_jsonl(out).rows) == n
    assert {r["engine"] for r in read_jsonl(out).rows} == {"sglang"}


@pytest.mark.timeout(90)
def test_embedded_engine_running_batch_is_seen_and_joined(tmp_path: Path) -> None:
    """The embedded engine serves vLLM's names: under 6 concurrent requests its running gauge rises."""
    with start_embedded([], log_path=tmp_path / "engine.log") as engine:
        models = json.loads(urllib.request.urlopen(engine.url + "/v1/models", timeout=10).read())
        model = models["data"][0]["id"]
        scraper = MetricsScraper(engine.url, tmp_path, interval_s=0.03)
        assert scraper.start() is True and scraper.engine == "vllm"
        sent: list[float] = []

        def send() -> None:
            body = json.dumps({"model": model, "prompt": "the harbour town", "max_tokens": 96, "temperature": 0})
            req = urllib.request.Request(
                engine.url + "/v1/completions", data=body.encode(), headers={"Content-Type": "application/json"}
            )
            sent.append(time.time())
            urllib.request.urlopen(req, timeout=30).read()

        threads = [threading.Thread(target=send) for _ in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        time.sleep(0.1)
        scraper.close()
    rows = read_jsonl(tmp_path / ENGINE_METRICS_FILE).rows
    running = np.array([r["running"] for r in rows], dtype=np.float64)
    assert rows[0]["running"] == 0.0  # idle before the requests
    assert running.max() >= 2.0
    joined = nearest_running(np.array(sent), np.array([r["t"] for r in rows]), running, max_gap_s=0.5)
    assert not np.isnan(joined).any()


@pytest.mark.timeout(90)
def test_embedded_engine_gauge_over_each_lifetime_agrees_with_its_batch_sizes(tmp_path: Path) -> None:
    """Six concurrent requests to the embedded engine, scraped at the default 50 ms: the running gauge of
    the samples taken while each request was in flight (the window join) tells the batch the engine's
    own per-step batch sizes (``x_batch_sizes``, the truth) report."""
    with start_embedded([], log_path=tmp_path / "engine.log") as engine:
        models = json.loads(urllib.request.urlopen(engine.url + "/v1/models", timeout=10).read())
        model = models["data"][0]["id"]
        scraper = MetricsScraper(engine.url, tmp_path)
        assert scraper.start() is True
        done: list[tuple[float, float, list[int]]] = []

        def send() -> None:
            body = {"model": model, "prompt": "the harbour town", "max_tokens": 96, "temperature": 0}
            req = urllib.request.Request(
                engine.url + "/v1/completions",
                data=json.dumps({**body, "x_batch_sizes": True}).encode(),
                headers={"Content-Type": "application/json"},
            )
            t0 = time.time()
            answer = json.loads(urllib.request.urlopen(req, timeout=30).read())
            done.append((t0, time.time() - t0, answer["x_batch_sizes"]))

        threads = [threading.Thread(target=send) for _ in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        scraper.close()
    rows = read_jsonl(tmp_path / ENGINE_METRICS_FILE).rows
    sent = np.array([d[0] for d in done])
    _, med, _, count = window_running(
        sent, sent + np.array([d[1] for d in done]), [r["t"] for r in rows], [r["running"] for r in rows]
    )
    assert (count >= 3).all(), count  # every request was seen several times while in flight
    for (_, _, sizes), m in zip(done, med, strict=True):
        assert min(sizes) <= m <= max(sizes)
    assert float(np.median(med)) == float(np.median([np.median(d[2]) for d in done]))


# ---------------------------------------------------------------- the join


def arr(*xs: float) -> np.ndarray:
    return np.array(xs, dtype=np.float64)


def test_join_picks_the_nearest_sample() -> None:
    t, running = arr(10.0, 10.25, 10.5, 10.75), arr(1, 2, 3, 4)
    got = nearest_running(arr(10.1, 10.2, 10.49, 10.74, 9.5, 11.2), t, running)
    assert got.tolist() == [1, 2, 3, 4, 1, 4]


def test_join_tie_goes_to_the_earlier_sample() -> None:
    assert nearest_running(arr(1.5, 2.5), arr(1.0, 2.0, 3.0), arr(7, 8, 9)).tolist() == [7, 8]


def test_join_gap_beyond_max_is_nan() -> None:
    got = nearest_running(arr(0.0, 5.0, 8.9, 9.1, 12.0), arr(5.5, 10.0), arr(3, 6), max_gap_s=1.0)
    assert got[1] == 3 and got[3] == 6
    assert math.isnan(got[0]) and math.isnan(got[2]) and math.isnan(got[4])  # 5.5, 1.1 and 2.0 s away


def test_join_unsorted_samples_nan_counts_and_no_samples() -> None:
    # NaN counts are skipped: the nearest *known* count answers, if within the gap.
    got = nearest_running(arr(1.0, 2.0, 3.0), arr(3.0, 1.0, 2.1), arr(30, 10, np.nan))
    assert got.tolist() == [10, 10, 30]
    assert np.isnan(nearest_running(arr(1.0, 2.0), arr(), arr())).all()
    assert np.isnan(nearest_running(arr(np.nan), arr(1.0), arr(4))).all()


times = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)


@given(
    st.lists(st.tuples(times, st.integers(0, 64)), max_size=30),
    st.lists(times, max_size=30),
    st.floats(min_value=0.0, max_value=20.0),
)
def test_join_result_is_always_a_sample_value_or_nan(
    samples: list[tuple[float, int]], sends: list[float], gap: float
) -> None:
    t = np.array([s[0] for s in samples], dtype=np.float64)
    running = np.array([s[1] for s in samples], dtype=np.float64)
    got = nearest_running(np.array(sends, dtype=np.float64), t, running, max_gap_s=gap)
    assert got.shape == (len(sends),)
    for sent, value in zip(sends, got, strict=True):
        dist = np.abs(t - sent)
        if math.isnan(value):
            assert not (dist <= gap).any()  # NaN only when no sample is close enough
        else:
            best = dist.min()
            assert best <= gap
            assert value in set(running[dist == best].tolist())  # one of the nearest samples' values
