"""The POST fast path sends the bytes geventhttpclient's ``request`` sends, and drops a connection the server closed."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator

import pytest

from loadgen.load.client import make_client

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class Recorder:
    """A one-thread HTTP server that keeps every request's bytes; ``close_after``: it hangs up after each answer."""

    def __init__(self, close_after: bool) -> None:
        self.close_after = close_after
        self.requests: list[bytes] = []
        self.connections = 0
        self.hung_up = threading.Event()  # set each time the server closed a connection
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                while self._one(conn) and not self.close_after:
                    pass
            self.hung_up.set()

    def _one(self, conn: socket.socket) -> bool:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        while len(body) < length:
            body += conn.recv(65536)
        self.requests.append(head + b"\r\n\r\n" + body)  # the whole request, however the reads split it
        conn.sendall(ANSWER)
        return True


@pytest.fixture
def kept() -> Iterator[Recorder]:
    server = Recorder(close_after=False)
    yield server
    server.listener.close()


@pytest.fixture
def hanging_up() -> Iterator[Recorder]:
    server = Recorder(close_after=True)
    yield server
    server.listener.close()


@pytest.mark.parametrize("close", [False, True])
def test_the_same_bytes_as_the_librarys_request(kept: Recorder, close: bool) -> None:
    client = make_client(kept.url, connect_timeout_s=2.0, read_timeout_s=5.0, api_key="sk-test")
    body = b'{"prompt": "' + b"word " * 30_000 + b'", "max_tokens": 4}'  # larger than one send
    ids = [uuid.uuid4().hex for _ in range(4)]
    try:
        for rid in ids[:2]:  # the head built once, the id filled in each time
            ours = client.post_bytes("/v1/completions", body, rid.encode(), close=close)
            assert ours.status_code == 200 and ours.read() == b"{}"
        for rid in ids[2:]:
            headers = {"Connection": "close", "X-Request-Id": rid} if close else {"X-Request-Id": rid}
            theirs = client.request("POST", "/v1/completions", body=body, headers=headers)
            assert theirs.status_code == 200 and theirs.read() == b"{}"
    finally:
        client.close()
    sent = [request.replace(rid.encode(), b"<id>") for request, rid in zip(kept.requests, ids, strict=True)]
    assert sent[0] == sent[1] == sent[2] == sent[3]
    assert all(f"\r\nX-Request-Id: {rid}\r\n".encode() in r for r, rid in zip(kept.requests, ids, strict=True))
    assert kept.requests[0].startswith(b"POST /v1/completions HTTP/1.1\r\n")
    assert (b"\r\nConnection: close\r\n" in kept.requests[0]) is close


def test_a_connection_the_server_closed_is_not_reused(hanging_up: Recorder) -> None:
    client = make_client(hanging_up.url, connect_timeout_s=2.0, read_timeout_s=5.0, api_key=None)
    try:
        for _ in range(3):
            resp = client.post_bytes("/v1/completions", b"{}", uuid.uuid4().hex.encode())
            assert resp.status_code == 200 and resp.read() == b"{}"
            assert hanging_up.hung_up.wait(5.0)  # the socket back in the pool now reads as closed
            hanging_up.hung_up.clear()
    finally:
        client.close()
    assert len(hanging_up.requests) == 3 and hanging_up.connections == 3
