import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from loadgen.core.errors import EndpointError
from loadgen.core.wire import Features, Kind
from loadgen.runs.probe import probe

WANTED = Features(return_token_ids=True, logprobs=True, top_logprobs=2, include_usage=True)


def test_probe_reads_model_and_identity(fault_server: str) -> None:
    info = probe(fault_server, model=None, kinds={"completions"}, wanted=WANTED, api_key=None)
    assert info.model == "m"
    assert info.kinds["completions"].identity == "token_ids"
    assert info.kinds["completions"].features.return_token_ids
    assert info.features_json()["completions"]["attempts"][0].endswith("HTTP 200")


def test_unknown_model_lists_what_is_served(fault_server: str) -> None:
    with pytest.raises(EndpointError, match=r"model 'nope' is not served; the server has \['m'\]"):
        probe(fault_server, model="nope", kinds={"completions"}, wanted=WANTED, api_key=None)


def test_missing_chat_endpoint_is_named(fault_server: str) -> None:
    with pytest.raises(EndpointError, match="no chat endpoint"):
        probe(fault_server, model="m", kinds={"chat"}, wanted=WANTED, api_key=None)


def test_unreachable_endpoint_fails_fast_with_url() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(EndpointError, match=f"http://127.0.0.1:{port}/v1/models: cannot connect"):
        probe(f"http://127.0.0.1:{port}", model=None, kinds={"completions"}, wanted=WANTED, api_key=None)
    assert time.monotonic() - t0 < 5


def test_not_openai_compatible(fault_server: str) -> None:
    with pytest.raises(EndpointError, match="expected an OpenAI-compatible server"):
        probe(fault_server + "/nothing-here", model=None, kinds={"completions"}, wanted=WANTED, api_key=None)


def test_a_busy_endpoint_is_asked_again_not_read_as_a_dialect(tmp_path: Path) -> None:
    """503s say nothing about which fields the server accepts: the probe keeps asking for token ids."""
    from loadgen.launchers.process import start_embedded

    args = ["--fault-status", "503", "--fault-rate", "0.5", "--fault-seed", "3"]
    with start_embedded(args, log_path=tmp_path / "e.log") as engine:
        info = probe(engine.url, model=None, kinds={"completions"}, wanted=WANTED, api_key=None)
        assert info.kinds["completions"].features.return_token_ids
        assert info.kinds["completions"].identity == "token_ids"
    always = ["--fault-status", "503", "--fault-rate", "1.0"]
    with (
        start_embedded(always, log_path=tmp_path / "f.log") as engine,
        pytest.raises(EndpointError, match="HTTP 503 to every probe request"),
    ):
        probe(engine.url, model=None, kinds={"completions"}, wanted=WANTED, api_key=None)


# --- x_batch_sizes: asked first, dropped first ----------------------------------------------------

WANTED_SIZES = replace(WANTED, batch_sizes=True)


@pytest.mark.parametrize("kind", ["completions", "chat"])
def test_the_embedded_engine_reports_batch_sizes(engine_url: str, kind: Kind) -> None:
    info = probe(engine_url, model=None, kinds={kind}, wanted=WANTED_SIZES, api_key=None)
    got = info.kinds[kind]
    assert got.features.batch_sizes and got.features.return_token_ids
    assert len(got.attempts) == 1 and "'batch_sizes': True" in got.attempts[0]


def test_a_server_that_ignores_the_field_keeps_everything_else(fault_server: str) -> None:
    info = probe(fault_server, model=None, kinds={"completions"}, wanted=WANTED_SIZES, api_key=None)
    got = info.kinds["completions"]
    assert not got.features.batch_sizes
    assert got.features == WANTED  # the rest of the rich dialect, from the one accepted request
    assert len(got.attempts) == 1 and got.attempts[0].endswith("HTTP 200")


STANDARD = {
    "model",
    "prompt",
    "messages",
    "max_tokens",
    "seed",
    "temperature",
    "top_p",
    "n",
    "frequency_penalty",
    "presence_penalty",
    "stream",
    "stream_options",
    "logprobs",
    "top_logprobs",
}


class StrictServer(ThreadingHTTPServer):
    """Answers 400 to any request field it does not know, naming it (pydantic ``extra="forbid"`` servers).

    The first path segment says what it knows besides the standard fields: ``/ids`` also knows
    ``return_token_ids``; ``/plain`` nothing more. Every generation body it was sent is kept in ``bodies``."""

    bodies: list[tuple[str, dict[str, Any]]]


class StrictHandler(BaseHTTPRequestHandler):
    server: StrictServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _reply(self, status: int, body: object) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        if self.path.endswith("/v1/models"):
            self._reply(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
        else:
            self._reply(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        prefix = self.path.split("/")[1]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append((prefix, body))
        known = STANDARD | ({"return_token_ids"} if prefix == "ids" else set())
        extra = sorted(set(body) - known)
        if extra:
            self._reply(400, {"error": {"message": f"Extra inputs are not permitted: {extra}", "code": 400}})
            return
        choice: dict[str, Any] = {"index": 0, "text": "Yes", "finish_reason": "length"}
        if body.get("return_token_ids"):
            choice["token_ids"] = [9454]
        if body.get("logprobs") is not None:
            top = [{"Yes": -0.1, "No": -2.5}]
            choice["logprobs"] = {"tokens": ["Yes"], "token_logprobs": [-0.1], "top_logprobs": top, "text_offset": [0]}
        self._reply(200, {"id": "c", "object": "text_completion", "model": "m", "choices": [choice]})


@pytest.fixture(scope="module")
def strict_server() -> Iterator[StrictServer]:
    server = StrictServer(("127.0.0.1", 0), StrictHandler)
    server.bodies = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(10)


def _url(server: StrictServer, prefix: str) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/{prefix}"


def test_a_server_that_rejects_the_field_loses_only_batch_sizes(strict_server: StrictServer) -> None:
    strict_server.bodies.clear()
    info = probe(_url(strict_server, "ids"), model=None, kinds={"completions"}, wanted=WANTED_SIZES, api_key=None)
    got = info.kinds["completions"]
    assert got.features == WANTED  # batch_sizes dropped, token ids kept
    assert got.identity == "token_ids"
    sent = [body for _, body in strict_server.bodies]
    assert [("x_batch_sizes" in b, "return_token_ids" in b) for b in sent] == [(True, True), (False, True)]
    assert got.attempts[0].endswith("HTTP 400") and got.attempts[1].endswith("HTTP 200")


def test_batch_sizes_go_first_then_the_rest_one_field_at_a_time(strict_server: StrictServer) -> None:
    strict_server.bodies.clear()
    info = probe(_url(strict_server, "plain"), model=None, kinds={"completions"}, wanted=WANTED_SIZES, api_key=None)
    got = info.kinds["completions"]
    assert got.features == replace(WANTED, return_token_ids=False)
    assert got.identity == "tokens"
    sent = [body for _, body in strict_server.bodies]
    assert [("x_batch_sizes" in b, "return_token_ids" in b) for b in sent] == [
        (True, True),
        (False, True),
        (False, False),
    ]
    assert [a.rsplit(" ", 1)[1] for a in got.attempts] == ["400", "400", "200"]


def test_without_batch_sizes_wanted_nothing_is_asked_twice(strict_server: StrictServer) -> None:
    strict_server.bodies.clear()
    info = probe(_url(strict_server, "ids"), model=None, kinds={"completions"}, wanted=WANTED, api_key=None)
    assert info.kinds["completions"].features == WANTED
    assert [("x_batch_sizes" in b) for _, b in strict_server.bodies] == [False]
