"""The gevent client against a real local server that misbehaves on request: every fault becomes data."""

from __future__ import annotations

import gc
import socket
import uuid

import orjson
import pytest

from loadgen.core.scenario import parse_scenario
from loadgen.core.scenario.schema import MAX_RESPONSE_BYTES
from loadgen.core.wire import Features, Kind, build_body
from loadgen.core.wire.urls import api_path, v1_path
from loadgen.load.canary_request import canary_body, canary_record
from loadgen.load.client import Outcome, make_client, max_tokens_in, send_background, send_canary

FEATURES = Features(return_token_ids=True, logprobs=True, top_logprobs=1)


def rid() -> str:
    return uuid.uuid4().hex


@pytest.fixture
def server(fault_server: str) -> str:
    return fault_server


def call(  # type: ignore[no-untyped-def]
    url: str,
    prompt: str,
    stream: bool,
    read_timeout_s: float = 5.0,
    usage_only: bool = False,
    *,
    max_tokens: int = 3,
    request_timeout_s: float | None = None,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
    api_key: str | None = None,
):
    client = make_client(
        url,
        connect_timeout_s=2.0,
        read_timeout_s=read_timeout_s,
        api_key=api_key,
        request_timeout_s=request_timeout_s,
        max_response_bytes=max_response_bytes,
    )
    body = build_body(
        "completions",
        model="m",
        prompt=prompt,
        messages=None,
        max_tokens=max_tokens,
        seed=0,
        stream=stream,
        features=FEATURES,
    )
    try:
        if usage_only:  # as a background user sends: serialised, max_tokens read back from the bytes
            return send_background(
                client,
                api_path(url, "completions"),
                "completions",
                orjson.dumps(body),
                rid().encode(),
                stream=stream,
                secret=api_key,
            )
        return send_canary(client, api_path(url, "completions"), "completions", body, rid(), secret=api_key)
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
    streamed, whole = call(server, "ok", True, usage_only=True), call(server, "ok", True)
    assert streamed.ok and streamed.completion is None  # read by its frames (loadgen.core.wire.sse_frames)
    assert streamed.usage == whole.usage and streamed.ttft_s is not None


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


@pytest.mark.parametrize("prompt", ["malformed", "error-in-stream", "huge"])
def test_a_stream_left_mid_body_gives_its_connection_back(server: str, prompt: str) -> None:
    """The next request on the same one-connection client must not wait for the abandoned one."""
    client = make_client(server, connect_timeout_s=2.0, read_timeout_s=5.0, api_key=None, max_response_bytes=1 << 20)
    path = api_path(server, "completions")
    try:
        for p, stream in ((prompt, True), ("ok", False)):
            body = build_body(
                "completions",
                model="m",
                prompt=p,
                messages=None,
                max_tokens=3,
                seed=0,
                stream=stream,
                features=FEATURES,
            )
            out = send_canary(client, path, "completions", body, rid())
        assert out.ok and out.latency_s is not None and out.latency_s < 2.0, out.error_message
    finally:
        client.close()


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
        out = send_canary(client, api_path(server, "completions"), "completions", body, rid(), secret="injected")
    finally:
        client.close()
    assert out.error_message is not None
    assert "injected" not in out.error_message and "[redacted]" in out.error_message


# --- a hostile endpoint: no answer forever, no answer too large, no impossible answer, no key kept ---------


@pytest.mark.parametrize("usage_only", [False, True])
@pytest.mark.parametrize("stream", [False, True])
def test_a_trickle_ends_at_the_total_deadline(server: str, stream: bool, usage_only: bool) -> None:
    """A byte (or an SSE ``: ping``) every 0.2 s never trips a 5 s read timeout; the 1 s deadline ends it."""
    out = call(server, "trickle", stream, read_timeout_s=5.0, usage_only=usage_only, request_timeout_s=1.0)
    assert out.error_kind == "timeout", out.error_message
    assert out.error_message is not None and "total deadline of 1 s" in out.error_message
    assert out.latency_s is not None and 0.9 < out.latency_s < 3.0


@pytest.mark.parametrize("usage_only", [False, True])
def test_the_default_deadline_is_the_read_timeout_plus_two_seconds_a_token(server: str, usage_only: bool) -> None:
    out = call(server, "trickle", True, read_timeout_s=0.5, usage_only=usage_only, max_tokens=1)
    assert out.error_kind == "timeout" and "total deadline of 2.5 s" in (out.error_message or "")
    assert out.latency_s is not None and 2.4 < out.latency_s < 4.5


def test_max_tokens_is_read_back_from_a_serialised_body() -> None:
    body = build_body(
        "chat",
        model="m",
        prompt=None,
        messages=[{"role": "user", "content": 'say "max_tokens": 99'}],
        max_tokens=7,
        seed=0,
        stream=True,
        features=FEATURES,
    )
    assert max_tokens_in(orjson.dumps(body)) == 7
    assert max_tokens_in(b'{"prompt": "x"}') is None


@pytest.mark.parametrize("usage_only", [False, True])
@pytest.mark.parametrize("stream", [False, True])
def test_a_response_over_the_size_cap_is_cut(server: str, stream: bool, usage_only: bool) -> None:
    """3 MiB of body (a stream: one endless line) against a 1 MiB cap."""
    out = call(server, "huge", stream, usage_only=usage_only, max_response_bytes=1024 * 1024)
    assert out.error_kind == "response_too_large", out.error_message
    assert "1048576 bytes (endpoint.max_response_bytes)" in (out.error_message or "")
    assert out.http_status == 200 and out.completion is None


@pytest.mark.parametrize("usage_only", [False, True])
@pytest.mark.parametrize("stream", [False, True])
def test_a_request_leaves_no_reference_cycle(server: str, stream: bool, usage_only: bool) -> None:
    """Every response is freed as its last reference goes, not left to the cyclic collector: the size cap once
    wrapped each response's own ``feed`` in a closure, and every request left a cycle of about ten objects."""
    client = make_client(server, connect_timeout_s=2.0, read_timeout_s=5.0, api_key=None)
    body = orjson.dumps(
        build_body(
            "completions", model="m", prompt="ok", messages=None, max_tokens=3, seed=0, stream=stream, features=FEATURES
        )
    )
    path = api_path(server, "completions")
    requests = 30

    def one() -> Outcome:
        if usage_only:
            return send_background(client, path, "completions", body, rid().encode(), stream=stream)
        return send_canary(client, path, "completions", orjson.loads(body), rid())

    try:
        one()  # the pool's first socket
        gc.collect()
        gc.disable()
        try:
            outs = [one() for _ in range(requests)]
            unreachable = gc.collect()
        finally:
            gc.enable()
    finally:
        client.close()
    assert all(out.ok for out in outs)
    assert unreachable < requests, f"{unreachable} objects in cycles after {requests} requests"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("prompt", "why"),
    [
        ("too-many-tokens", "5 tokens generated, more than the 3 max_tokens asked for"),
        ("negative-id", "token id -1 is not an integer in 0..2147483647"),
        ("fewer-ids", "fewer token ids (2) than tokens (3)"),
    ],
)
def test_an_impossible_completion_is_malformed(server: str, stream: bool, prompt: str, why: str) -> None:
    out = call(server, prompt, stream)
    assert out.error_kind == "malformed_body" and out.error_message == why
    assert out.completion is None  # never compared, and no id a reader could choke on


KEY = "lgtest-0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize("stream", [False, True])
def test_a_key_echoed_into_a_completion_is_redacted_from_the_record(server: str, stream: bool) -> None:
    """The server puts ``Bearer KEY`` into the text, split over two token strings and their alternatives."""
    scenario = parse_scenario({"canaries": [{"prompt": "echo-auth", "stream": stream, "max_tokens": 3}]}, "s")
    canary = scenario.canaries[0]
    kind, body = canary_body(scenario, canary, model="m", features=FEATURES, salt=False)
    client = make_client(server, connect_timeout_s=2.0, read_timeout_s=5.0, api_key=KEY)
    try:
        request_id = rid()
        out = send_canary(client, api_path(server, kind), kind, body, request_id, secret=KEY)
    finally:
        client.close()
    assert out.ok, out.error_message
    assert out.completion is not None and out.completion.tokens is not None
    assert out.completion.tokens[0] == "Hello " and out.completion.tokens[1:] == ["[redacted]", "[redacted]"]
    assert out.completion.token_ids == [101, 102, 103]  # positions and ids stay comparable
    record = canary_record(
        out, request_id=request_id, run_id="r", canary=canary, kind=kind, body=body, phase="sweep", level=0,
        inflight_at_send=0, worker="w", cache_action=None, cache_reset=None,
    )  # fmt: skip
    written = orjson.dumps(record.to_dict())
    assert KEY.encode() not in written and KEY[:16].encode() not in written and b"[redacted]" in written


# --- the progress hook (loadgen.load.holding watches hand-overs with it; background requests report it) ------


def with_progress(
    url: str,
    kind: Kind,
    *,
    model: str,
    prompt: str,
    stream: bool,
    max_tokens: int = 3,
    features: Features = FEATURES,
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
        out = send_background(
            client, api_path(url, kind), kind, orjson.dumps(body), rid().encode(), stream=stream, progress=calls.append
        )
    finally:
        client.close()
    return out, calls


@pytest.mark.parametrize("kind", ["completions", "chat"])
def test_progress_counts_every_generated_token_of_an_engine_stream(engine_url: str, kind: Kind) -> None:
    features = Features(include_usage=True)
    out, calls = with_progress(
        engine_url, kind, model="loadgen-tiny", prompt="Count to ten.", stream=True, max_tokens=12, features=features
    )
    assert out.ok, out.error_message
    assert out.completion is None and out.usage is not None
    # a running total, once per piece of the body read, from the first event that carried a generated token (not
    # a chat role chunk before it): every token event (an engine that falls behind its client sends several
    # tokens in one event, as vLLM does), then usage, [DONE]
    assert calls and calls[0] >= 1 and calls == sorted(set(calls))
    assert 3 <= calls[-1] <= out.usage["completion_tokens"] + 2


def test_progress_ends_at_a_known_streams_event_count(server: str) -> None:
    """The fault server's stream is three chunks and [DONE]: the running total ends at 4, once per piece read."""
    out, calls = with_progress(server, "completions", model="m", prompt="ok", stream=True)
    assert out.ok and calls and calls[-1] == 4 and calls == sorted(set(calls))


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
