"""The gevent client against a real local server that misbehaves on request: every fault becomes data."""

from __future__ import annotations

import socket
from typing import ClassVar

import orjson
import pytest

from loadgen.load import client as client_module
from loadgen.load.client import Outcome, make_client, send, send_payload
from loadgen.wire import Features, Kind, build_body
from loadgen.wire.sse import SSEDecoder, SSEEvent
from loadgen.wire.urls import api_path, v1_path

FEATURES = Features(return_token_ids=True, logprobs=True, top_logprobs=1)


@pytest.fixture
def server(fault_server: str) -> str:
    return fault_server


def call(url: str, prompt: str, stream: bool, read_timeout_s: float = 5.0, usage_only: bool = False):  # type: ignore[no-untyped-def]
    client = make_client(url, connect_timeout_s=2.0, read_timeout_s=read_timeout_s, api_key=None)
    body = build_body(
        "completions", model="m", prompt=prompt, messages=None, max_tokens=3, seed=0, stream=stream, features=FEATURES
    )
    try:
        if usage_only:
            return send_payload(
                client, api_path(url, "completions"), "completions", orjson.dumps(body), stream=stream, usage_only=True
            )
        return send(client, api_path(url, "completions"), "completions", body)
    finally:
        client.close()


@pytest.mark.parametrize("stream", [False, True])
def test_ok_is_parsed_and_timed(server: str, stream: bool) -> None:
    out = call(server, "ok", stream)
    assert out.ok and out.http_status == 200
    assert out.completion is not None and out.completion.token_ids == [101, 102, 103]
    assert out.completion.logprobs == [-0.1, -0.25, -0.5]
    assert out.latency_s is not None and out.latency_s > 0
    assert (out.ttft_s is not None and out.ttft_s <= out.latency_s) if stream else out.ttft_s is None


def test_usage_only_keeps_the_usage_of_a_whole_body(server: str) -> None:
    full, light = call(server, "ok", False), call(server, "ok", False, usage_only=True)
    assert light.ok and light.completion is None
    assert light.usage == full.usage == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    streamed = call(server, "ok", True, usage_only=True)
    assert streamed.ok and streamed.completion is not None  # a stream is decoded whole all the same


@pytest.mark.parametrize("usage_only", [False, True])
@pytest.mark.parametrize(
    ("prompt", "stream", "kind"),
    [
        ("status:503", False, "http_status"),
        ("status:429", True, "http_status"),
        ("reset", True, "truncated_stream"),
        ("nodone", True, "truncated_stream"),
        ("malformed", True, "malformed_body"),
        ("malformed", False, "malformed_body"),
        ("error-in-stream", True, "stream_error"),
    ],
)
def test_faults_are_classified(server: str, prompt: str, stream: bool, kind: str, usage_only: bool) -> None:
    out = call(server, prompt, stream, usage_only=usage_only)
    assert not out.ok
    assert out.error_kind == kind, out.error_message
    assert out.error_message
    assert out.latency_s is not None


def test_http_error_keeps_status_and_server_message(server: str) -> None:
    out = call(server, "status:503", False)
    assert out.http_status == 503 and "injected 503" in (out.error_message or "")


def test_read_timeout(server: str) -> None:
    out = call(server, "slow", False, read_timeout_s=0.5)
    assert out.error_kind == "timeout"
    assert out.latency_s is not None and out.latency_s < 2.5


def test_connection_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = call(f"http://127.0.0.1:{port}", "ok", False)
    assert out.error_kind == "connection"


@pytest.mark.parametrize(
    ("base", "path"),
    [
        ("http://h:1", "/v1/completions"),
        ("http://h:1/v1", "/v1/completions"),
        ("http://h:1/v1/", "/v1/completions"),
        ("https://h/api", "/api/v1/completions"),
    ],
)
def test_api_path_keeps_prefixes(base: str, path: str) -> None:
    assert api_path(base, "completions") == path
    assert v1_path(base, "models") == path.replace("completions", "models")


def test_a_key_echoed_by_the_server_is_redacted(server: str) -> None:
    client = make_client(server, connect_timeout_s=2.0, read_timeout_s=5.0, api_key=None)
    body = build_body(
        "completions",
        model="m",
        prompt="status:418",
        messages=None,
        max_tokens=3,
        seed=0,
        stream=False,
        features=FEATURES,
    )
    try:
        out = send(client, api_path(server, "completions"), "completions", body, secret="injected")
    finally:
        client.close()
    assert out.error_message is not None
    assert "injected" not in out.error_message and "[redacted]" in out.error_message


# --- the progress hook (loadgen.load.holding watches hand-overs with it) --------------------------


class CountingDecoder(SSEDecoder):
    """The client's SSE decoder, counting the events it hands the client (fed while reading, flushed at the end)."""

    made: ClassVar[list[CountingDecoder]] = []

    def __init__(self) -> None:
        super().__init__()
        self.fed = 0
        self.flushed = 0
        CountingDecoder.made.append(self)

    def feed(self, data: bytes) -> list[SSEEvent]:
        events = super().feed(data)
        self.fed += len(events)
        return events

    def flush(self) -> list[SSEEvent]:
        events = super().flush()
        self.flushed += len(events)
        return events


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> list[CountingDecoder]:
    CountingDecoder.made = []
    monkeypatch.setattr(client_module, "SSEDecoder", CountingDecoder)
    return CountingDecoder.made


def with_progress(
    url: str, kind: Kind, *, model: str, prompt: str, stream: bool, max_tokens: int = 3, features: Features = FEATURES
) -> tuple[Outcome, list[int]]:
    calls: list[int] = []
    client = make_client(url, connect_timeout_s=2.0, read_timeout_s=30.0, api_key=None)
    messages = [{"role": "user", "content": prompt}] if kind == "chat" else None
    body = build_body(
        kind,
        model=model,
        prompt=None if messages else prompt,
        messages=messages,
        max_tokens=max_tokens,
        seed=0,
        stream=stream,
        features=features,
    )
    try:
        out = send_payload(
            client, api_path(url, kind), kind, orjson.dumps(body), stream=stream, usage_only=True, progress=calls.append
        )
    finally:
        client.close()
    return out, calls


@pytest.mark.parametrize("kind", ["completions", "chat"])
def test_progress_counts_every_generated_token_of_an_engine_stream(
    engine_url: str, kind: Kind, counting: list[CountingDecoder]
) -> None:
    features = Features(include_usage=True, batch_sizes=True)
    out, calls = with_progress(
        engine_url, kind, model="loadgen-tiny", prompt="Count to ten.", stream=True, max_tokens=12, features=features
    )
    assert out.ok, out.error_message
    [decoder] = counting
    assert decoder.fed >= 3 and decoder.flushed == 0  # a token chunk, the usage chunk, [DONE] at least
    assert out.completion is not None and out.usage is not None
    # once per event that carried a generated token (not the role chunk, usage or [DONE]), counting up by one
    assert calls == list(range(1, out.usage["completion_tokens"] + 1))
    sizes = out.completion.batch_sizes  # the engine's own batch sizes ride on the finish chunk
    assert sizes is not None and len(sizes) == out.usage["completion_tokens"] and all(n >= 1 for n in sizes)


def test_progress_counts_a_known_stream_exactly(server: str) -> None:
    """The fault server's stream is three chunks and [DONE]."""
    out, calls = with_progress(server, "completions", model="m", prompt="ok", stream=True)
    assert out.ok
    assert calls == [1, 2, 3]  # three tokens; [DONE] carries none


@pytest.mark.parametrize(("url_fixture", "model"), [("server", "m"), ("engine_url", "loadgen-tiny")])
def test_progress_is_not_called_for_a_whole_body(url_fixture: str, model: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue(url_fixture)
    out, calls = with_progress(url, "completions", model=model, prompt="ok", stream=False)
    assert out.ok, out.error_message
    assert calls == []


def test_progress_is_not_called_when_the_server_refuses(server: str) -> None:
    """No byte of a stream arrived: the request never held its slot."""
    out, calls = with_progress(server, "completions", model="m", prompt="status:503", stream=True)
    assert out.error_kind == "http_status"
    assert calls == []


def test_progress_stops_where_a_stream_is_cut(server: str) -> None:
    out, calls = with_progress(server, "completions", model="m", prompt="reset", stream=True)
    assert out.error_kind == "truncated_stream"
    assert calls == [1]  # the one token sent before the reset
