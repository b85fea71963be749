"""The load path's one seam with geventhttpclient: every use of its private parts is in this module.

Why: the load path is tuned below geventhttpclient's public API (a POST in one ``send``, a response-size
cap counted as blocks arrive, a stream read without ``readline``'s rescans), and that leans on attributes
and methods the library does not promise to keep. Here they are in one place, each with its reason, so
an upgrade has one module to check; ``tests/loadgen/load/test_transport.py`` checks each one against the
installed version with a real client and a real server, and fails naming the part that moved. No other
module of the project imports geventhttpclient (that test checks it too).

Checked against geventhttpclient 2.6.1 (the version ``docker/constraints.txt`` pins and CI installs);
``pyproject.toml`` declares ``>=2.6.1,<3``. Before widening that range, run the contract tests against the
new version.

The private parts used, and why each:

- ``HTTPClient._connection_pool`` (the client's ``ConnectionPool``, or ``SSLConnectionPool`` for https):
  ``PooledClient.post_bytes`` takes a socket from it (``get_socket``) and gives a broken one back
  (``release_socket``) exactly as ``request`` does; ``faster_pool`` changes a plain pool's class.
- ``ConnectionPool._is_socket_alive(sock) -> bool``, called by ``get_socket`` on every kept-alive socket
  it hands out: ``KeptAlivePool`` overrides it, because the library's check goes through gevent's
  ``select``, which also yields to the hub on every call (one plain ``select`` system call here, timeout 0).
- ``HTTPClient._build_request(method, uri, body=, headers=, chunked=) -> str``: the head ``request``
  sends, built once per path and kept (``post_head``), so the bytes on the wire stay the library's while
  the per-call header merge and validation are skipped; only the request id (``X-Request-Id``, whose line
  the library writes with the call's other headers, before ``Host``) and the length change per request.
- How ``request`` makes its answer: ``HTTPSocketPoolResponse(sock, pool, block_size=client.block_size,
  method=..., headers_type=client.headers_type)`` (reads the head in its constructor, gives the socket
  back to the pool on ``release``); ``post_bytes`` builds it the same way after its own send.
- ``HTTPResponse.feed(data)``, the parser's entry, which ``read`` and ``readline`` call with every block
  received: ``CappedResponse`` overrides it to count the bytes towards the size cap, and ``cap_body``
  changes a live response's class to it (a class change, not a method patched on the instance: see there).
- ``HTTPResponse._body_buffer``, the ``bytearray`` the parser appends the body to (one object for the
  response's life, emptied in place by ``read``): ``whole_lines`` takes what has arrived from it.
- ``HTTPSocketResponse._sock``, the socket, None once the response released it (at the message's end or
  a failure): ``whole_lines`` receives from it as ``readline`` does (``block_size`` at a time, then
  ``feed``), and stops with ``HTTPConnectionClosed`` when it is gone, as ``readline`` does.

Runs inside gevent (a Locust process), or blocking in an unpatched process (``loadgen.studies.coldboot``).
No I/O of its own beyond the client's socket; does not import Locust.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterator
from typing import Any, Protocol, Self

import gevent
from gevent import monkey
from geventhttpclient import HTTPClient
from geventhttpclient.connectionpool import ConnectionPool
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError, HTTPSocketPoolResponse

__all__ = [
    "REQUEST_ID",
    "HTTPConnectionClosed",
    "HTTPParseError",
    "KeptAlivePool",
    "PooledClient",
    "Response",
    "ResponseTooLarge",
    "cap_body",
    "faster_pool",
    "post_head",
    "whole_lines",
]

Response = HTTPSocketPoolResponse  # what ``request`` and ``post_bytes`` answer with

_select = monkey.get_original("select", "select")  # a system call that never waits (timeout 0), no hub yield
_LENGTH = "Content-Length: "
_PLACEHOLDER = b"0"  # a one-byte body: the library writes Content-Length: 1 last, before the blank line
REQUEST_ID = "X-Request-Id"  # the header every POST carries its request's id in (docs/design.md, "Joining ids")
_ID_MARK = "f" * 32  # stands for the id in the head built once; found as its whole header line


class KeptAlivePool(ConnectionPool):
    """geventhttpclient's pool; a kept-alive socket readable while idle (closed by the server) is dropped, as
    there, but seen by one ``select`` call (gevent's ``select`` also sleeps 0 on every call)."""

    def _is_socket_alive(self, sock: Any) -> bool:
        if sock is None:
            return False
        try:
            fd = sock.fileno()
            return fd >= 0 and not _select([fd], [], [], 0.0)[0]
        except (OSError, ValueError):
            return False


def faster_pool(client: HTTPClient) -> None:
    """Give a plain-HTTP client the ``KeptAlivePool`` (an SSL pool is left as it is)."""
    if type(client._connection_pool) is ConnectionPool:
        client._connection_pool.__class__ = KeptAlivePool


def post_head(client: HTTPClient, path: str, close: bool) -> tuple[bytes, bytes]:
    """The head ``request("POST", path, headers={"Connection": "close" if close, REQUEST_ID: id})`` sends, up
    to the value of its Content-Length, cut in two around the id's value."""
    headers = {"Connection": "close"} if close else {}
    headers[REQUEST_ID] = _ID_MARK
    head = client._build_request("POST", path, body=_PLACEHOLDER, headers=headers, chunked=False)
    end = f"{_LENGTH}{len(_PLACEHOLDER)}\r\n\r\n"
    if not head.endswith(end):
        raise AssertionError(f"geventhttpclient's request head does not end with its length: {head!r}")
    line = f"\r\n{REQUEST_ID}: {_ID_MARK}\r\n"  # a header value holds no line break: the line is found once
    if head.count(line) != 1:
        raise AssertionError(f"geventhttpclient's request head does not hold {REQUEST_ID} once: {head!r}")
    before, after = str(head[: -len(end) + len(_LENGTH)]).split(line)
    return f"{before}\r\n{REQUEST_ID}: ".encode("latin-1"), f"\r\n{after}".encode("latin-1")


class PooledClient(HTTPClient):
    """geventhttpclient's client on one kept-alive connection, with a POST that sends the bytes its ``request``
    sends for a fraction of its work (``post_bytes``).

    Why: against a fast endpoint ``HTTPClient.request`` was, after reading the answer, the largest cost of the
    load path (``benchmarks/generator_ceiling.py``): each call merges and validates the same fixed headers
    again and builds the head string, ``sendall`` asks the socket for its buffer size (a system call) before
    sending, and the pool's check that a kept-alive connection is still open goes through gevent's
    ``select``, which also yields to the hub every time. Here the head is built once per path by the
    library's own ``_build_request`` and only the request id and the length are filled in, head and body go
    out in one ``send``,
    and the liveness check is the one ``select`` system call it always was, without the yield (``KeptAlivePool``).

    What it must not do: send other bytes than ``request`` would, retry (a POST may have been processed: the
    library does not retry one either, RFC 9110 section 9.2.2), or keep a socket a failed send left in the pool."""

    post_heads: dict[tuple[str, bool], tuple[bytes, bytes]]  # ``post_head`` by (path, close), built when first needed

    @classmethod
    def connect(
        cls, base_url: str, *, connect_timeout_s: float, read_timeout_s: float, headers: dict[str, str]
    ) -> Self:
        """A one-connection client bound to ``base_url``'s host, with the faster pool where it applies."""
        client = cls.from_url(
            base_url,
            concurrency=1,
            connection_timeout=connect_timeout_s,
            network_timeout=read_timeout_s,
            headers=headers,
        )
        assert isinstance(client, cls)  # from_url builds the class it is called on
        client.post_heads = {}
        faster_pool(client)
        return client

    def post_bytes(self, path: str, body: bytes, request_id: bytes, *, close: bool = False) -> Response:
        """``request("POST", path, body=body, headers={REQUEST_ID: request_id})``, with ``Connection: close`` if
        ``close``. ``request_id``: 32 lowercase hex digits, the caller's (never checked here: the hot path)."""
        head = self.post_heads.get((path, close))
        if head is None:
            head = self.post_heads[(path, close)] = post_head(self, path, close)
        data = b"".join((head[0], request_id, head[1], b"%d\r\n\r\n" % len(body), body))
        pool = self._connection_pool
        sock = pool.get_socket()
        try:
            sent = sock.send(data)
            if sent < len(data):
                sock.sendall(memoryview(data)[sent:])
        except OSError as exc:
            if exc.errno not in (errno.ECONNRESET, errno.EPIPE):
                pool.release_socket(sock)
                raise
            # the server may have answered before closing (a 4xx to a large body): the response reads that answer
            # or fails, and releases the socket either way, as the library's request does
        except BaseException:
            pool.release_socket(sock)  # a deadline or a kill mid-send: the socket holds half a request
            raise
        return HTTPSocketPoolResponse(
            sock, pool, block_size=self.block_size, method="POST", headers_type=self.headers_type
        )


class ResponseTooLarge(Exception):
    """More bytes arrived than the cap ``cap_body`` set; raised from inside the response's reads."""


class CappedResponse(HTTPSocketPoolResponse):
    """geventhttpclient's pooled response whose every block received counts towards ``cap`` (``cap_body``)."""

    cap: int
    received: int

    def feed(self, data: str | bytes) -> None:
        self.received += len(data)
        if self.received > self.cap:
            raise ResponseTooLarge
        HTTPSocketPoolResponse.feed(self, data)


def cap_body(resp: Response, limit: int) -> None:
    """Make every later read of ``resp`` raise ``ResponseTooLarge`` once more than ``limit`` bytes came.

    geventhttpclient's ``read`` keeps receiving until the message is whole, so a server sending without
    end would fill memory; it, and ``whole_lines``, hand each received block to the response's ``feed``,
    which ``CappedResponse`` counts from here on (the socket is then released, never reused). The class is
    changed, not the method wrapped on the instance: a closure holding the response's own bound method made
    every response a reference cycle, left to the garbage collector (about a tenth of the load process's
    CPU at 10,000 requests a second, ``benchmarks/generator_ceiling.py``)."""
    resp.received = 0  # type: ignore[attr-defined]  # CappedResponse's, set before the class becomes it
    resp.cap = limit  # type: ignore[attr-defined]
    resp.__class__ = CappedResponse


class CountsBytes(Protocol):
    response_bytes: int


def whole_lines(resp: Response, out: CountsBytes, pause: Callable[[], float] | None = None) -> Iterator[bytes]:
    """The body as it arrives, cut after its last line break (the rest waits for the next one), then the
    unterminated rest at the end. Counts ``out.response_bytes``. ``pause``: seconds to let pass before a
    read from the socket (what arrives meanwhile comes in that read and, where it filled its block, the
    reads straight after it), never after a read that filled its block.

    Why not ``resp.readline``: geventhttpclient rescans its whole buffer for the separator after every
    block received, and the SSE decoder re-joins an unterminated line on every feed: both cost time
    quadratic in a line's length, so one endless line (a hostile server) would hold this process, and
    every request in it, for most of a minute before the size cap. Here a line's pieces are kept apart
    and joined once. Reading what has arrived uses the response's own buffer, socket and parser, as
    its ``readline`` does."""
    pending: list[bytes] = []  # pieces of the line not ended yet
    full = False  # the last read filled its block: more may be waiting, so the next one does not pause
    while True:
        buffered = resp._body_buffer
        if buffered:
            piece = bytes(buffered)
            del buffered[:]
            out.response_bytes += len(piece)
            cut = max(piece.rfind(b"\n"), piece.rfind(b"\r")) + 1
            if cut:
                pending.append(piece[:cut])
                yield b"".join(pending)
                pending = [piece[cut:]]
            else:
                pending.append(piece)
        elif resp.message_complete:
            break
        elif resp._sock is None:
            raise HTTPConnectionClosed("connection closed.")
        else:
            if pause is not None and not full and (wait_s := pause()):
                gevent.sleep(wait_s)
            try:
                data = resp._sock.recv(resp.block_size)
                resp.feed(data)
            except BaseException:
                resp.release()
                raise
            full = len(data) == resp.block_size
    if rest := b"".join(pending):
        yield rest
