"""End to end through the real CLI: a server that trickles, a byte every 0.2 s and never done, holds no part of
a run past its total deadline, and each part says so.

Each byte comes well inside every per-read timeout, so only a deadline on the whole answer ends it, and the
server trickles until the test stops it (minutes): before the deadlines, each run below hung there. The
places: the probe (``/v1/models``' status line and headers trickle: a body deadline never started), the first
``/metrics`` scrape at the run's start (the page's body trickles), and the held-level gate under non-streamed
background (the engine check's ``/metrics`` trickles once the first scrape has answered). The server is a
small ``http.server`` in this process, one per test, since ``/metrics`` lives at the server's root.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.loadgen.cli.clikit import RealRun, loadgen_run
from tests.loadgen.fault_server import whole
from tests.loadgen.local_http import LocalServer, QuietHandler, serving
from tests.loadgen.scenariokit import tiny_scenario

GAUGES = b'vllm:num_requests_running{model_name="m"} 1\nvllm:num_requests_waiting{model_name="m"} 0\n'
TRICKLE_EVERY_S = 0.2


class TrickleServer(LocalServer):
    def __init__(self, mode: str) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.mode = mode  # "head": everything trickles its headers; "metrics": /metrics its body; "gate": after one
        self.stopped = threading.Event()
        self.metrics_asked = 0
        self.lock = threading.Lock()


class Handler(QuietHandler):
    server: TrickleServer

    def _trickle(self, head: bytes) -> None:
        """``head`` at once, then a byte every 0.2 s until the test ends: every wait short, never done."""
        self.wfile.write(head)
        self.wfile.flush()
        while not self.server.stopped.wait(TRICKLE_EVERY_S):
            self.wfile.write(b"a" if self.server.mode == "head" else b"#")
            self.wfile.flush()
        self.close_connection = True

    def do_GET(self) -> None:
        if self.server.mode == "head":
            return self._trickle(b"HTTP/1.1 200 OK\r\nX-Pad: ")
        if self.path == "/metrics":
            with self.server.lock:
                self.server.metrics_asked += 1
                first = self.server.metrics_asked == 1
            if self.server.mode == "gate" and first:
                return self.send_body(200, GAUGES, "text/plain")
            return self._trickle(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000000\r\n\r\n")
        if self.path == "/v1/models":
            return self.send_body(200, json.dumps({"object": "list", "data": [{"id": "m"}]}).encode())
        self.send_error(404)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.server.mode == "head":
            return self._trickle(b"HTTP/1.1 200 OK\r\nX-Pad: ")
        time.sleep(0.3)  # a background request in flight for a while: its slot holds a level
        self.send_body(200, json.dumps(whole()).encode())


@pytest.fixture
def trickle_server(request: pytest.FixtureRequest) -> Iterator[TrickleServer]:
    with serving(TrickleServer(request.param)) as server:
        try:
            yield server
        finally:
            server.stopped.set()  # the trickling answers end, so that the server can shut down


def _run(server: TrickleServer, tmp_path: Path, levels: list[int]) -> RealRun:
    timeouts = "connect_timeout_s = 1\nread_timeout_s = 5"
    scenario = tiny_scenario(
        "trickle", server.url, levels=levels, background=True, endpoint=timeouts, settle_timeout_s=30
    )
    # the trickle lasts until the test ends: without a deadline, the run would still be waiting
    return loadgen_run(scenario, tmp_path / "runs", "--quiet", timeout=90)


@pytest.mark.parametrize("trickle_server", ["head"], indirect=True)
def test_a_probe_answer_that_trickles_its_headers_ends_at_its_deadline(
    trickle_server: TrickleServer, tmp_path: Path
) -> None:
    done = _run(trickle_server, tmp_path, [0])
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.strip()]
    assert f"{trickle_server.url}/models: the answer was still arriving after 2 s in all" in line
    assert "the server trickles it" in line


@pytest.mark.parametrize("trickle_server", ["metrics"], indirect=True)
def test_a_first_scrape_that_trickles_ends_at_its_deadline_and_the_run_goes_on(
    trickle_server: TrickleServer, tmp_path: Path
) -> None:
    done = _run(trickle_server, tmp_path, [0])
    assert done.returncode == 0, done.stderr
    manifest = orjson.loads((done.run_dir / "manifest.json").read_bytes())
    assert manifest["status"] == "finished"
    metrics = manifest["engine_metrics"]
    assert metrics["available"] is False
    assert "the page was still arriving after 4 s in all" in metrics["notice"], metrics
    assert "the server trickles it" in metrics["notice"]
    assert metrics["notice"] in manifest["notices"]


@pytest.mark.parametrize("trickle_server", ["gate"], indirect=True)
def test_the_held_level_gate_gives_up_on_a_trickled_page_and_says_so(
    trickle_server: TrickleServer, tmp_path: Path
) -> None:
    done = _run(trickle_server, tmp_path, [1])
    assert done.returncode == 0, done.stderr
    manifest = orjson.loads((done.run_dir / "manifest.json").read_bytes())
    assert manifest["status"] == "finished"
    url = trickle_server.url.removesuffix("/v1") + "/metrics"
    gate = [n for n in manifest["notices"] if n.startswith("held-level gate:")]
    assert gate == [
        f"held-level gate: {url} not asked again in this run (the page was still arriving after 2 s in all "
        "(each byte within 1 s): the server trickles it); a level under non-streamed background counted as "
        "held without its running count"
    ]
    report = orjson.loads((done.run_dir / "report.json").read_bytes())
    assert gate[0] in report["run"]["notices"]
    assert manifest["unsettled_levels"] == []  # the gate was not cut by its settle deadline: it gave up first
