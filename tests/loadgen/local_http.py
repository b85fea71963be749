"""A small ``http.server`` in the test's own process, for endpoints a test shapes answer by answer or byte by byte.

Why: the trickle, disk-full and probe-JSON tests each need a server whose every byte they control (a trickled
status line, a held answer, a JSON text no framework would send); the fault server's routes cannot do that.
The base classes hold what they share: the server's ``/v1`` URL, quiet logging, one JSON answer, start and
stop. Test support only.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypeVar


class LocalServer(ThreadingHTTPServer):
    daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class QuietHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: object) -> None:
        pass

    def send_body(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


S = TypeVar("S", bound=LocalServer)


@contextmanager
def serving(server: S) -> Iterator[S]:
    """``server`` answering on a thread of its own until the block ends."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
