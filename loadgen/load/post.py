"""A POST through geventhttpclient's connection pool: the bytes its ``request`` sends, for a fraction of its work.

Why: against a fast endpoint ``HTTPClient.request`` was, after reading the answer, the largest cost of the
load path (``benchmarks/generator_ceiling.py``): each call merges and validates the same fixed headers again
and builds the head string, ``sendall`` asks the socket for its buffer size (a system call) before sending,
and the pool's check that a kept-alive connection is still open goes through gevent's ``select``, which
also yields to the hub every time. Here the head is built once per path by the library's own
``_build_request`` and only the length is filled in, head and body go out in one ``send``, and the
liveness check is the one ``select`` system call it always was, without the yield.

What it must not do: send other bytes than ``request`` would, retry (a POST may have been processed: the
library does not retry one either, RFC 9110 section 9.2.2), or keep a socket a failed send left in the pool.
Runs inside gevent; uses geventhttpclient's pool and response classes as its ``request`` does.
"""

from __future__ import annotations

import errno
from typing import Any

from gevent import monkey
from geventhttpclient.connectionpool import ConnectionPool
from geventhttpclient.response import HTTPSocketPoolResponse

_select = monkey.get_original("select", "select")  # a system call that never waits (timeout 0), no hub yield
_LENGTH = "Content-Length: "
_PLACEHOLDER = b"0"  # a one-byte body: the library writes Content-Length: 1 last, before the blank line


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


def faster_pool(client: Any) -> None:
    """Give a plain-HTTP client the ``KeptAlivePool`` (an SSL pool is left as it is)."""
    if type(client._connection_pool) is ConnectionPool:
        client._connection_pool.__class__ = KeptAlivePool


def post_head(client: Any, path: str, close: bool) -> bytes:
    """The head ``request("POST", path, ...)`` sends, up to the value of its Content-Length."""
    headers = {"Connection": "close"} if close else None
    head = client._build_request("POST", path, body=_PLACEHOLDER, headers=headers, chunked=False)
    end = f"{_LENGTH}{len(_PLACEHOLDER)}\r\n\r\n"
    if not head.endswith(end):
        raise AssertionError(f"geventhttpclient's request head does not end with its length: {head!r}")
    return str(head[: -len(end) + len(_LENGTH)]).encode("latin-1")


def post(client: Any, heads: dict[tuple[str, bool], bytes], path: str, body: bytes, *, close: bool) -> Any:
    """``client.request("POST", path, body=body)``, with ``Connection: close`` if ``close``; ``heads``: the
    client's heads by (path, close), filled as they are first needed."""
    head = heads.get((path, close))
    if head is None:
        head = heads[(path, close)] = post_head(client, path, close)
    data = b"".join((head, b"%d\r\n\r\n" % len(body), body))
    pool = client._connection_pool
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
        sock, pool, block_size=client.block_size, method="POST", headers_type=client.headers_type
    )
