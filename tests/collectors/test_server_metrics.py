"""Per-server scraping: every server behind an endpoint scraped into its own file, each fault a notice naming the
server and its role, the key sent to the configured hosts only; the reader gives one series per server."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import orjson

from collectors.jsonl import read_jsonl
from collectors.read.runfolder import load_run
from collectors.server_metrics import ServerScrapers, samples_file
from loadgen.core.manifest import MANIFEST_SCHEMA, Manifest, write_manifest
from loadgen.core.scenario.schema import Server

KEY = "sk-test-0123456789abcdef"


def gauges(running: int) -> str:
    return f'# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{engine="0"}} {running}\n'


@dataclass
class Answer:
    body: str = ""
    status: int = 200
    content_type: str = "text/plain; version=0.0.4"
    location: str | None = None  # a redirect
    delay_s: float = 0.0
    auth: list[str | None] = field(default_factory=list)


@contextmanager
def serving(answer: Answer) -> Iterator[str]:
    """A real HTTP server on a free port answering every GET from ``answer``; yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answer.auth.append(self.headers.get("Authorization"))
            body = answer.body.encode()
            try:
                time.sleep(answer.delay_s)
                self.send_response(answer.status)
                self.send_header("Content-Type", answer.content_type)
                if answer.location:
                    self.send_header("Location", answer.location)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_each_server_its_own_file_and_each_fault_a_notice_naming_it(tmp_path: Path) -> None:
    prefill, decode, html, slow, elsewhere = (
        Answer(gauges(3)),
        Answer(gauges(1)),
        Answer("<html>"),
        Answer(gauges(2)),
        Answer(gauges(9)),
    )
    html.content_type = "text/html"
    with ExitStack() as stack:
        p, d, h, s, other = (stack.enter_context(serving(a)) for a in (prefill, decode, html, slow, elsewhere))
        redirect = Answer(status=302, location=f"{other}/metrics")
        r = stack.enter_context(serving(redirect))
        servers = [
            Server(name="p", role="prefill", base_url=p),
            Server(name="d", role="decode", base_url=f"{d}/v1"),
            Server(name="h", role="decode", base_url=h),
            Server(name="down", role="prefill", base_url=f"http://127.0.0.1:{closed_port()}"),
            Server(name="none", role="decode", base_url=d, metrics_url=""),
            Server(name="slow", role="both", base_url=s),
            Server(name="moved", role="decode", base_url=r),
        ]
        scrapers = ServerScrapers(servers, tmp_path, api_key=KEY, interval_s=0.02, timeout_s=0.2)
        scrapers.start()
        slow.delay_s = 0.5  # answered the first scrape, then times out: gaps, never a stop
        time.sleep(0.8)
        scrapers.close()
    p_rows, d_rows = (read_jsonl(tmp_path / samples_file(n)).rows for n in ("p", "d"))
    assert len(p_rows) >= 5 and {r["running"] for r in p_rows} == {3.0}
    assert len(d_rows) >= 5 and {r["running"] for r in d_rows} == {1.0}
    assert not any((tmp_path / samples_file(n)).exists() for n in ("h", "down", "none", "moved"))
    assert not (tmp_path / "engine_metrics.jsonl").exists()  # the endpoint itself is not scraped
    facts = {f["name"]: f for f in scrapers.facts()}
    assert facts["d"]["metrics_url"] == f"{d}/metrics" and facts["none"]["metrics_url"] is None
    assert facts["none"]["engine_metrics"] is None and facts["p"]["file"] == "engine_metrics-p.jsonl"
    assert KEY not in orjson.dumps(scrapers.facts()).decode()
    notices = scrapers.notices()
    assert len(notices) == 5, notices
    by_name = {n.split(" ")[1]: n for n in notices}
    assert "(decode): " in by_name["'h'"] and "Content-Type text/html" in by_name["'h'"]
    assert "(prefill): " in by_name["'down'"] and "Connection refused" in by_name["'down'"]
    assert by_name["'none'"] == "server 'none' (decode) has no metrics_url: its side's co-residency is unmeasured."
    assert "(both) at " in by_name["'slow'"] and "timed out" in by_name["'slow'"]
    assert "(decode): " in by_name["'moved'"] and "redirect" in by_name["'moved'"]
    # the key goes to each configured metrics URL, never on to where a redirect points
    assert set(prefill.auth) == {f"Bearer {KEY}"} and redirect.auth == [f"Bearer {KEY}"] and elsewhere.auth == []


def test_the_reader_gives_one_series_per_server_and_an_old_folder_none(tmp_path: Path) -> None:
    servers = [
        Server(name="p", role="prefill", base_url="http://h:1"),
        Server(name="d", role="decode", base_url="http://h:2"),
    ]
    scenario = {"endpoint": {"servers": [s.model_dump() for s in servers]}, "canaries": []}
    write_manifest(tmp_path, Manifest.model_validate({"schema": MANIFEST_SCHEMA, "run_id": "r", "scenario": scenario}))
    record = {"schema": 1, "run_id": "r", "canary_id": "c", "request_id": "a", "phase": "sweep", "level": 0}
    record |= {"inflight_at_send": 0, "sent_at": 1.0, "status": "ok"}
    (tmp_path / "canaries.jsonl").write_bytes(orjson.dumps(record) + b"\n")
    (tmp_path / samples_file("p")).write_bytes(b'{"t": 2.0, "running": 4}\n{"t": 1.0, "running": 3}\n')
    run = load_run(tmp_path)
    p, d = run.servers
    assert (p.name, p.role, p.t.tolist(), p.running.tolist()) == ("p", "prefill", [1.0, 2.0], [3.0, 4.0])
    assert (d.name, d.role, len(d.t)) == ("d", "decode", 0)  # no file: no samples
    assert run.engine_t is None
    del scenario["endpoint"]
    write_manifest(tmp_path, Manifest.model_validate({"schema": MANIFEST_SCHEMA, "run_id": "r", "scenario": scenario}))
    assert load_run(tmp_path).servers == []
    assert np.isnan(load_run(tmp_path).canaries.frame["latency_s"]).all()
