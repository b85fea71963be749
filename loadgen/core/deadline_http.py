"""``http.client`` connections whose every read, status line and headers included, stops at a total deadline.

Why: ``http.client``'s timeout bounds each wait for a byte, not the answer. A server that sends a byte of its
status line, a header or its body every few tenths of a second keeps every wait short and the answer unfinished
for as long as it likes: the probe, the first ``/metrics`` scrape (synchronous at a run's start) and the
held-level gate's engine check would sit there silently. Here each read waits at most what is left of the
deadline set for the current exchange (``expect_by``), and one that finds it passed raises ``DeadlineExceeded``
(a ``TimeoutError``, as a per-read timeout is). Blocking; works patched by gevent or not.
"""

from __future__ import annotations

import http.client
import io
import math
import time
from typing import Any


class DeadlineExceeded(TimeoutError):
    """The whole answer did not arrive by its deadline: the server trickles it (or is that slow)."""


class _DeadlineReader(io.RawIOBase):
    """The socket's raw reader, each read waiting at most what is left until the connection's deadline."""

    def __init__(self, sock: Any, conn: _Deadline) -> None:
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)  # the socket counts this reader: close() stays correct
        self._conn = conn

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        left = self._conn.deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded(f"the answer was not whole within {self._conn.total_s:g} s")
        per_read = self._conn.timeout
        self._sock.settimeout(left if not isinstance(per_read, int | float) else min(per_read, left))
        try:
            return int(self._raw.readinto(buffer))
        except TimeoutError:
            if time.monotonic() >= self._conn.deadline:
                raise DeadlineExceeded(f"the answer was not whole within {self._conn.total_s:g} s") from None
            raise

    def close(self) -> None:
        self._raw.close()
        super().close()


class _DeadlineSocket:
    """The connected socket, as ``http.client`` uses it, with its responses read through ``_DeadlineReader``."""

    def __init__(self, sock: Any, conn: _Deadline) -> None:
        self._sock = sock
        self._conn = conn

    def makefile(self, mode: str = "rb", *_: Any, **__: Any) -> io.BufferedReader:
        assert mode == "rb", mode  # http.client only reads through files
        return io.BufferedReader(_DeadlineReader(self._sock, self._conn))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _Deadline:
    """Mixed into an ``http.client`` connection: ``expect_by(total_s)`` before each exchange."""

    timeout: Any
    sock: Any
    deadline: float = math.inf
    total_s: float = math.inf

    def expect_by(self, total_s: float) -> None:
        """The exchange that starts now, connect to last byte, must be over within ``total_s``."""
        self.total_s = total_s
        self.deadline = time.monotonic() + total_s
        if self.sock is not None and isinstance(self.timeout, int | float):
            self.sock.settimeout(self.timeout)  # the last read of the exchange before may have shortened it

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]  # TCP, and for HTTPS the TLS handshake, as usual
        self.sock = _DeadlineSocket(self.sock, self)


class DeadlineHTTPConnection(_Deadline, http.client.HTTPConnection):
    pass


class DeadlineHTTPSConnection(_Deadline, http.client.HTTPSConnection):
    pass
