"""The held-level gate's engine check reads the loaded side's servers behind a router, summed."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from loadgen.core.scenario import parse_scenario
from loadgen.load.engine_check import EngineCheck


@contextmanager
def gauges(running: int, waiting: int) -> Iterator[str]:
    body = (
        f'vllm:num_requests_running{{engine="0"}} {running}\nvllm:num_requests_waiting{{engine="0"}} {waiting}\n'
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def closed() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def scenario(servers: list[tuple[str, str, str]], side: str | None) -> dict[str, object]:
    return {
        "endpoint": {
            "base_url": "http://127.0.0.1:1",
            "servers": [{"name": n, "role": r, "base_url": u} for n, r, u in servers],
        },
        "canaries": [{"prompt": "x"}],
        "background": {"side": side} if side else {},
    }


def test_the_decode_sides_servers_are_summed_and_the_prefill_side_counts_waiting_too() -> None:
    with ExitStack() as stack:
        p, d1, d2 = (stack.enter_context(gauges(r, w)) for r, w in ((1, 4), (3, 9), (2, 0)))
        dead = closed()
        servers = [("p", "prefill", p), ("d1", "decode", d1), ("d2", "decode", d2), ("gone", "decode", dead)]
        decode = EngineCheck.for_run(parse_scenario(scenario(servers, None), "t"), "http://127.0.0.1:1", None)
        assert decode.urls == [f"{d1}/metrics", f"{d2}/metrics", f"{dead}/metrics"]
        assert decode.running() == 5.0  # running only; the dead one is dropped, never asked again
        assert decode.urls == [f"{d1}/metrics", f"{d2}/metrics"]
        assert decode.confirms(5) and not decode.confirms(6)
        prefill = EngineCheck.for_run(parse_scenario(scenario(servers, "prefill"), "t"), "http://127.0.0.1:1", None)
        assert prefill.urls == [f"{p}/metrics"] and prefill.running() == 5.0  # 1 running + 4 waiting
    one = EngineCheck.for_run(parse_scenario(scenario([], None), "t"), "http://127.0.0.1:1/v1", None)
    assert one.urls == ["http://127.0.0.1:1/metrics"]
    assert one.running() is None and one.urls == [] and one.confirms(100)  # cannot say: the check is skipped
