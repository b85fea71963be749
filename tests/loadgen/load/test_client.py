"""The gevent client against a real local server that misbehaves on request: every fault becomes data."""

from __future__ import annotations

import socket

import orjson
import pytest

from loadgen.load.client import make_client, send, send_payload
from loadgen.wire import Features, build_body
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
