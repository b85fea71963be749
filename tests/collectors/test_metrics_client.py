"""The scraper's HTTP client: one kept-alive connection for every scrape, a server that drops it answered anew,
no redirect followed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from collectors.metrics_client import MetricsClient
from loadgen.core.errors import EndpointError

BODY = b'vllm:num_requests_running{engine="0"} 2\n'


@contextmanager
def server(mode: str) -> Iterator[tuple[str, list[int]]]:
    """``keep``: HTTP/1.1 keep-alive; ``close``: HTTP/1.0, closed after each answer; ``drop``: HTTP/1.1 that
    silently closes the connection after each answer; ``redirect``: a 302. Yields the URL and the client ports."""
    ports: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0" if mode == "close" else "HTTP/1.1"

        def do_GET(self) -> None:
            ports.append(self.client_address[1])
            self.send_response(302 if mode == "redirect" else 200)
            if mode == "redirect":
                self.send_header("Location", "http://elsewhere.invalid/metrics")
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY)
            if mode == "drop":
                self.close_connection = True

        def log_message(self, *_: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/metrics", ports
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize(("mode", "connections"), [("keep", 1), ("close", 5), ("drop", 5)])
def test_every_scrape_answers_over_as_few_connections_as_the_server_allows(mode: str, connections: int) -> None:
    with server(mode) as (url, ports):
        client = MetricsClient(url, timeout_s=2.0)
        try:
            assert [client.fetch() for _ in range(5)] == [BODY.decode()] * 5
        finally:
            client.close()
    assert len(ports) == 5 and len(set(ports)) == connections


def test_a_redirect_is_a_failed_scrape_naming_where_it_points() -> None:
    with server("redirect") as (url, ports):
        client = MetricsClient(url, timeout_s=2.0, api_key="sk-secret-0123456789")
        with pytest.raises(
            EndpointError, match=r"HTTP 302 redirect to http://elsewhere\.invalid/metrics, not followed"
        ):
            client.fetch()
        client.close()
    assert len(ports) == 1
