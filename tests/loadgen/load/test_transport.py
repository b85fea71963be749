"""The contract of ``loadgen.load.transport`` with the installed geventhttpclient: each private part it uses is there
and behaves as the seam assumes, on a real client talking to a real HTTP server started here.

Why: the seam leans on attributes and methods geventhttpclient does not promise to keep (its docstring lists
them). An upgrade that moves one should fail here, naming the part, instead of deep inside a run as an
``AttributeError`` turned into a ``connection`` error on every request. Runs blocking, in this unpatched
process, as ``loadgen.studies.coldboot`` uses the client.
"""

from __future__ import annotations

import ast
import inspect
import threading
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

import pytest
from geventhttpclient import HTTPClient
from geventhttpclient.connectionpool import ConnectionPool
from geventhttpclient.response import HTTPSocketPoolResponse
from packaging.requirements import Requirement

from loadgen.load import transport
from loadgen.load.transport import (
    CappedResponse,
    HTTPConnectionClosed,
    KeptAlivePool,
    PooledClient,
    Response,
    ResponseTooLarge,
    cap_body,
    faster_pool,
    post_head,
    whole_lines,
)

ROOT = Path(__file__).resolve().parents[3]
VERSION = metadata.version("geventhttpclient")
BIG = b"x" * 200_000  # many blocks of the response's block_size
LINES = b"".join(b"data: %d\n\n" % i for i in range(2000))
RID = b"0123456789abcdef0123456789abcdef"  # a request id, as every POST carries one


def broken(part: str, use: str) -> str:
    return f"geventhttpclient {VERSION}: {part} is not as loadgen.load.transport assumes ({use})"


class Handler(BaseHTTPRequestHandler):
    """``/small``: ``{}``; ``/big``: ``BIG``; ``/lines``: ``LINES``; ``/held``: ``hello``, then ``world`` once
    the test sets ``go``. Keeps every connection alive (HTTP/1.1) and counts the connections it saw."""

    protocol_version = "HTTP/1.1"
    go: ClassVar[threading.Event]
    peers: ClassVar[set[int]]

    def log_message(self, *_: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.peers.add(self.client_address[1])
        if self.path == "/held":
            self._head(10)
            self.wfile.write(b"hello")
            self.wfile.flush()
            self.go.wait(10.0)
            self.wfile.write(b"world")
            return
        body = {"/small": b"{}", "/big": BIG, "/lines": LINES}[self.path]
        self._head(len(body))
        self.wfile.write(body)

    def _head(self, length: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.end_headers()
        self.wfile.flush()


@dataclass
class Server:
    url: str
    go: threading.Event
    peers: set[int]


@pytest.fixture
def server() -> Iterator[Server]:
    class OneHandler(Handler):  # this test's own event and connections
        go = threading.Event()
        peers: ClassVar[set[int]] = set()

    handler = OneHandler
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield Server(f"http://127.0.0.1:{httpd.server_address[1]}", handler.go, handler.peers)
    finally:
        handler.go.set()
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def client(server: Server) -> Iterator[PooledClient]:
    c = PooledClient.connect(server.url, connect_timeout_s=2.0, read_timeout_s=5.0, headers={})
    yield c
    c.close()


def test_the_installed_version_is_the_checked_one() -> None:
    """The declared range holds the installed version, and the version the seam's docstring says it was checked
    against is the one ``docker/constraints.txt`` pins (bump both, after these tests pass on the new one)."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    declared = [r for r in map(Requirement, deps) if r.name == "geventhttpclient"]
    assert declared, "pyproject.toml does not declare geventhttpclient"
    assert declared[0].specifier.contains(VERSION), f"geventhttpclient {VERSION} is outside {declared[0]}"
    pins = (ROOT / "docker" / "constraints.txt").read_text().splitlines()
    pinned = next(line.partition("==")[2] for line in pins if line.startswith("geventhttpclient=="))
    assert f"Checked against geventhttpclient {pinned} " in (transport.__doc__ or ""), (
        f"docker/constraints.txt pins geventhttpclient {pinned}: run these tests on it and say so in the seam"
    )


def test_the_client_has_a_connection_pool_and_a_plain_one_becomes_kept_alive() -> None:
    plain = HTTPClient.from_url("http://127.0.0.1:9/", concurrency=1)
    tls = HTTPClient.from_url("https://127.0.0.1:9/", concurrency=1)
    try:
        pool = getattr(plain, "_connection_pool", None)
        assert type(pool) is ConnectionPool, broken("HTTPClient._connection_pool", "post_bytes takes sockets from it")
        assert isinstance(tls._connection_pool, ConnectionPool) and type(tls._connection_pool) is not ConnectionPool
        faster_pool(plain)
        faster_pool(tls)
        assert type(plain._connection_pool) is KeptAlivePool
        assert type(tls._connection_pool) is not KeptAlivePool  # an SSL pool is left as it is
        for name in ("get_socket", "release_socket", "return_socket"):
            assert callable(getattr(pool, name, None)), broken(f"ConnectionPool.{name}", "post_bytes and release")
    finally:
        plain.close()
        tls.close()


def test_get_socket_checks_a_kept_alive_socket_with_is_socket_alive(client: PooledClient, server: Server) -> None:
    params = list(inspect.signature(ConnectionPool._is_socket_alive).parameters)
    assert params == ["self", "sock"], broken("ConnectionPool._is_socket_alive(sock)", "KeptAlivePool overrides it")
    seen: list[Any] = []

    class Watched(KeptAlivePool):
        def _is_socket_alive(self, sock: Any) -> bool:
            seen.append(sock)
            return super()._is_socket_alive(sock)

    client._connection_pool.__class__ = Watched
    first = client.post_bytes("/small", b"{}", RID)
    assert first.read() == b"{}" and first._sock is None  # the whole answer read: the socket back in the pool
    second = client.post_bytes("/small", b"{}", RID)
    assert second.read() == b"{}"
    assert len(seen) == 1 and seen[0] is not None, broken(
        "ConnectionPool.get_socket", "calls _is_socket_alive on each kept-alive socket it hands out"
    )
    assert len(server.peers) == 1  # the kept-alive socket was alive and reused


def test_build_request_gives_the_head_with_its_length_last(client: PooledClient) -> None:
    params = inspect.signature(HTTPClient._build_request).parameters
    assert {"body", "headers", "chunked"} <= set(params), broken("HTTPClient._build_request", "post_head")
    headers = {"Connection": "close", "X-Request-Id": RID.decode()}
    head = client._build_request("POST", "/v1/completions", body=b"0", headers=headers, chunked=False)
    assert isinstance(head, str), broken("HTTPClient._build_request", "returns the head as str")
    assert head.startswith("POST /v1/completions HTTP/1.1\r\n") and "\r\nConnection: close\r\n" in head
    assert f"\r\nX-Request-Id: {RID.decode()}\r\n" in head, broken("HTTPClient._build_request", "the call's headers")
    assert head.endswith("\r\nContent-Length: 1\r\n\r\n"), broken("HTTPClient._build_request", "length last")
    before, after = post_head(client, "/v1/completions", True)
    assert before + RID + after == head[: -len("1\r\n\r\n")].encode("latin-1")


def test_the_response_is_built_as_request_builds_it_and_gives_its_socket_back(
    client: PooledClient, server: Server
) -> None:
    """``post_bytes`` makes its answer as ``request`` does; tests/loadgen/load/test_post.py checks the bytes sent."""
    assert isinstance(client.block_size, int) and isinstance(client.headers_type, type)
    ctor = inspect.signature(HTTPSocketPoolResponse.__init__).parameters
    assert list(ctor)[1:3] == ["sock", "pool"], broken("HTTPSocketPoolResponse(sock, pool, **kw)", "post_bytes")
    for _ in range(3):
        resp = client.post_bytes("/big", b"{}", RID)
        assert type(resp) is HTTPSocketPoolResponse and resp.status_code == 200 and resp.read() == BIG
        assert resp.block_size == client.block_size and resp.method == "POST"
    assert len(server.peers) == 1, broken("HTTPSocketPoolResponse.release", "gives a finished socket back")


def test_read_hands_every_block_to_feed(client: PooledClient) -> None:
    resp = client.post_bytes("/big", b"{}", RID)
    early = len(resp._body_buffer)  # what came with the head, fed before the cap
    cap_body(resp, len(BIG))
    assert type(resp) is CappedResponse, broken("the response's class", "cap_body changes it")
    assert resp.read() == BIG
    assert resp.received == len(BIG) - early, broken("HTTPResponse.feed", "read calls it with each block")
    capped = client.post_bytes("/big", b"{}", RID)
    cap_body(capped, 1000)
    with pytest.raises(ResponseTooLarge):
        capped.read()
    assert capped._sock is None  # released on the failed read, never reused


def complete(resp: Response) -> bool:
    """``resp.message_complete``, read afresh (the parser sets it while ``feed`` runs)."""
    return resp.message_complete


def test_body_buffer_sock_and_feed_as_whole_lines_uses_them(client: PooledClient, server: Server) -> None:
    resp = client.post_bytes("/held", b"{}", RID)
    buf = getattr(resp, "_body_buffer", None)
    assert isinstance(buf, bytearray), broken("HTTPResponse._body_buffer", "whole_lines takes the body from it")
    sock = getattr(resp, "_sock", None)
    assert sock is not None and callable(sock.recv), broken("HTTPSocketResponse._sock", "whole_lines receives")
    while len(buf) < 5:
        resp.feed(sock.recv(resp.block_size))
    assert resp._body_buffer is buf and bytes(buf) == b"hello", broken("HTTPResponse.feed", "appends to _body_buffer")
    del buf[:]
    assert not complete(resp)
    server.go.set()
    while not complete(resp):
        assert resp._sock is not None
        resp.feed(resp._sock.recv(resp.block_size))
    assert resp._body_buffer is buf and bytes(buf) == b"world", broken("HTTPResponse._body_buffer", "one object")
    assert resp._sock is None, broken("HTTPSocketResponse._sock", "None once the message is complete")
    assert client.post_bytes("/small", b"{}", RID).read() == b"{}"
    assert len(server.peers) == 1  # the finished response gave its socket back to the pool


def test_whole_lines_reads_a_body_by_its_lines(client: PooledClient) -> None:
    @dataclass
    class Count:
        response_bytes: int = 0

    resp = client.post_bytes("/lines", b"{}", RID)
    cap_body(resp, 1 << 20)
    count = Count()
    pieces = list(whole_lines(resp, count, lambda: 0.0))
    assert b"".join(pieces) == LINES and all(p.endswith(b"\n") for p in pieces)
    assert count.response_bytes == len(LINES) and resp.message_complete


def test_a_released_response_ends_whole_lines_as_closed(client: PooledClient, server: Server) -> None:
    resp = client.post_bytes("/held", b"{}", RID)
    resp.release()
    assert resp._sock is None, broken("HTTPSocketResponse._sock", "None once released")
    del resp._body_buffer[:]
    with pytest.raises(HTTPConnectionClosed):
        list(whole_lines(resp, type("Count", (), {"response_bytes": 0})()))


def test_only_the_transport_imports_geventhttpclient() -> None:
    """Every use of the library goes through the seam, so its private parts cannot creep back elsewhere."""
    importers = []
    for path in sorted((ROOT / "loadgen").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "geventhttpclient" or n.startswith("geventhttpclient.") for n in names):
                importers.append(path.relative_to(ROOT).as_posix())
    assert sorted(set(importers)) == ["loadgen/load/transport.py"]
