"""API conformance over real HTTP against ``python -m loadgen.engine --port 0``: shapes as vLLM's."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from loadgen.engine.prompts import D3_SHORT_PROMPT
from tests.loadgen.engine.engine_http import post


@pytest.fixture(scope="module")
def url(engine_process: Any) -> Iterator[str]:
    with engine_process() as (base, _proc):
        yield base


def _post(url: str, path: str, body: Any, raw: bytes | None = None) -> tuple[int, bytes]:
    return post(url + path, body, raw)


def _get(url: str, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url + path, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _sse(body: bytes) -> list[Any]:
    frames = body.decode().split("\n\n")
    assert frames[-1] == "" and frames[-2] == "data: [DONE]"
    assert all(f.startswith("data: ") for f in frames[:-1])
    return [json.loads(f[6:]) for f in frames[:-2]]


BASE = {"temperature": 0, "max_tokens": 8, "seed": 0, "top_p": 1}


def test_completion_non_stream_shape(url: str) -> None:
    status, body = _post(
        url, "/v1/completions", {**BASE, "prompt": "the old man", "logprobs": 2, "return_token_ids": True}
    )
    assert status == 200
    r = json.loads(body)
    assert r["object"] == "text_completion" and r["model"] == "loadgen-tiny" and r["id"].startswith("cmpl-")
    (choice,) = r["choices"]
    lp = choice["logprobs"]
    assert len(choice["token_ids"]) == 8 == len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
    assert choice["prompt_token_ids"] and choice["finish_reason"] == "length" and choice["stop_reason"] is None
    assert "".join(lp["tokens"]) == choice["text"]
    assert lp["text_offset"][0] == 0 and lp["text_offset"] == sorted(lp["text_offset"])
    for token, logprob, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True):
        assert 2 <= len(top) <= 3 and top[token] == logprob <= 0
    usage = r["usage"]
    assert usage["completion_tokens"] == 8 and usage["total_tokens"] == usage["prompt_tokens"] + 8
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}


def test_completion_stream_matches_non_stream(url: str) -> None:
    body = {**BASE, "prompt": "the river and the sea", "logprobs": 1, "return_token_ids": True}
    full = json.loads(_post(url, "/v1/completions", body)[1])["choices"][0]
    status, raw = _post(url, "/v1/completions", {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert status == 200
    chunks = _sse(raw)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 8
    choices = [c["choices"][0] for c in chunks[:-1]]
    assert choices[0]["prompt_token_ids"] == full["prompt_token_ids"]
    assert all(c["prompt_token_ids"] is None for c in choices[1:])
    assert [t for c in choices for t in c["token_ids"]] == full["token_ids"]
    assert "".join(c["text"] for c in choices) == full["text"]
    assert [x for c in choices for x in c["logprobs"]["token_logprobs"]] == full["logprobs"]["token_logprobs"]
    assert [x for c in choices for x in c["logprobs"]["text_offset"]] == full["logprobs"]["text_offset"]
    assert choices[-1]["finish_reason"] == "length" and all(c["finish_reason"] is None for c in choices[:-1])


def test_chat_non_stream_and_stream_shapes(url: str) -> None:
    body = {
        **BASE,
        "messages": [{"role": "user", "content": "hello"}],
        "logprobs": True,
        "top_logprobs": 2,
        "return_token_ids": True,
    }
    r = json.loads(_post(url, "/v1/chat/completions", body)[1])
    assert r["object"] == "chat.completion" and r["prompt_token_ids"]
    choice = r["choices"][0]
    assert choice["message"]["role"] == "assistant" and len(choice["token_ids"]) == 8
    content = choice["logprobs"]["content"]
    assert "".join(e["token"] for e in content) == choice["message"]["content"]
    for e in content:
        assert bytes(e["bytes"]).decode() == e["token"] and len(e["top_logprobs"]) == 2
        assert e["top_logprobs"][0]["logprob"] >= e["top_logprobs"][1]["logprob"]
    chunks = _sse(_post(url, "/v1/chat/completions", {**body, "stream": True})[1])
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[0]["prompt_token_ids"] == r["prompt_token_ids"]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    deltas = [c["choices"][0] for c in chunks[1:]]
    assert "".join(d["delta"]["content"] for d in deltas) == choice["message"]["content"]
    assert [t for d in deltas for t in d["token_ids"]] == choice["token_ids"]
    assert [e for d in deltas for e in d["logprobs"]["content"]] == content


def test_tokens_as_token_ids_in_both_dialects(url: str) -> None:
    comp = json.loads(
        _post(
            url,
            "/v1/completions",
            {**BASE, "prompt": "the sea", "logprobs": 1, "return_tokens_as_token_ids": True, "return_token_ids": True},
        )[1]
    )
    choice = comp["choices"][0]
    assert choice["logprobs"]["tokens"] == [f"token_id:{i}" for i in choice["token_ids"]]
    assert all(k.startswith("token_id:") for top in choice["logprobs"]["top_logprobs"] for k in top)
    chat = json.loads(
        _post(
            url,
            "/v1/chat/completions",
            {
                **BASE,
                "messages": [{"role": "user", "content": "x"}],
                "logprobs": True,
                "return_tokens_as_token_ids": True,
            },
        )[1]
    )
    entries = chat["choices"][0]["logprobs"]["content"]
    assert all(e["token"].startswith("token_id:") and bytes(e["bytes"]).decode() == e["token"] for e in entries)


def test_no_logprobs_no_ids_unless_asked(url: str) -> None:
    r = json.loads(_post(url, "/v1/completions", {**BASE, "prompt": "x"})[1])
    choice = r["choices"][0]
    assert choice["logprobs"] is None and "token_ids" not in choice and choice["prompt_token_ids"] is None
    chat = json.loads(_post(url, "/v1/chat/completions", {**BASE, "messages": [{"role": "user", "content": "x"}]})[1])
    assert chat["choices"][0]["logprobs"] is None and chat["prompt_token_ids"] is None


def test_stop_string_is_honoured(url: str) -> None:
    free = json.loads(_post(url, "/v1/completions", {**BASE, "prompt": "the old man", "max_tokens": 16})[1])
    text = free["choices"][0]["text"]
    stop = text[5:8]
    r = json.loads(_post(url, "/v1/completions", {**BASE, "prompt": "the old man", "max_tokens": 16, "stop": stop})[1])
    choice = r["choices"][0]
    assert choice["text"] == text[: text.find(stop)]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", stop)


def test_prefix_cache_hits_show_in_usage_and_reset_clears_them(url: str) -> None:
    body = {**BASE, "prompt": D3_SHORT_PROMPT, "cache_salt": "test-reset"}
    _post(url, "/v1/completions", body)
    hit = json.loads(_post(url, "/v1/completions", body)[1])
    assert hit["usage"]["prompt_tokens_details"]["cached_tokens"] == 16
    assert _post(url, "/reset_prefix_cache", None, raw=b"")[0] == 200
    after = json.loads(_post(url, "/v1/completions", body)[1])
    assert after["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


@pytest.mark.parametrize(
    ("path", "raw", "status"),
    [
        ("/v1/completions", b"{not json", 400),
        ("/v1/completions", b'{"prompt": "x", "model": "nope"}', 404),
        ("/v1/completions", b'{"prompt": "x", "max_tokens": -1}', 400),
        ("/v1/completions", b'{"prompt": "x", "temperature": "hot"}', 400),
        ("/v1/chat/completions", b'{"messages": "hi"}', 400),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 100000}', 400),
        ("/v1/nothing", b"{}", 404),
    ],
)
def test_bad_requests_get_4xx_with_an_openai_error_body(url: str, path: str, raw: bytes, status: int) -> None:
    got, body = _post(url, path, None, raw=raw)
    assert got == status
    error = json.loads(body)["error"]
    assert error["message"] and error["code"] == status and set(error) == {"message", "type", "param", "code"}


def test_info_endpoints(url: str) -> None:
    assert _get(url, "/health")[0] == 200
    models = json.loads(_get(url, "/v1/models")[1])
    assert [m["id"] for m in models["data"]] == ["loadgen-tiny"]
    assert "version" in json.loads(_get(url, "/version")[1])
    text = _get(url, "/metrics")[1].decode()
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:generation_tokens_total",
        "vllm:prompt_tokens_total",
    ):
        assert f'{name}{{engine="0",model_name="loadgen-tiny"}}' in text


def _metric(url: str, name: str) -> float:
    for line in _get(url, "/metrics")[1].decode().splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(name)


def test_client_disconnect_aborts_the_request(url: str) -> None:
    parts = urlsplit(url)
    body = json.dumps({"prompt": "the sea", "max_tokens": 400, "stream": True, "ignore_eos": True}).encode()
    sock = socket.create_connection((parts.hostname, parts.port))
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    received = b""
    while b"data: " not in received:
        received += sock.recv(4096)
    assert _metric(url, "vllm:num_requests_running") == 1
    sock.close()
    deadline = time.monotonic() + 10
    while _metric(url, "vllm:num_requests_running") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _metric(url, "vllm:num_requests_running") == 0
    assert _metric(url, "vllm:generation_tokens_total") < 10_000


def test_many_concurrent_clients_all_complete(url: str) -> None:
    results: list[int] = []

    def client(i: int) -> None:
        status, body = _post(
            url,
            "/v1/completions",
            {"prompt": f"the king {i}", "max_tokens": 24, "temperature": 0, "stream": i % 2 == 0},
        )
        results.append(status if status != 200 or i % 2 else (200 if body.endswith(b"data: [DONE]\n\n") else 0))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(80)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [200] * 80


# x_batch_sizes: one entry per engine step the request had a row in. Its first step is its prefill,
# which already samples the first token; each later step decodes one more. So a request that runs
# to max_tokens (ignore_eos) is in exactly max_tokens steps.
DIALECTS: list[tuple[str, dict[str, Any]]] = [
    ("/v1/completions", {"prompt": "the old man and the sea"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "the old man and the sea"}]}),
]


def _batch_sizes(url: str, path: str, body: dict[str, Any]) -> tuple[list[int], int]:
    """(x_batch_sizes, completion tokens); for a stream, checks the field is on the finish chunk only."""
    status, raw = _post(url, path, body)
    assert status == 200
    if not body.get("stream"):
        r = json.loads(raw)
        return r["x_batch_sizes"], r["usage"]["completion_tokens"]
    chunks = _sse(raw)
    (final,) = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"] is not None]
    assert [c for c in chunks if "x_batch_sizes" in c] == [final]
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == [] and "x_batch_sizes" not in chunks[-1]
    return final["x_batch_sizes"], usage["completion_tokens"]


def _held(extra: dict[str, Any], stream: bool, max_tokens: int) -> dict[str, Any]:
    body = {**extra, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0, "x_batch_sizes": True}
    return {**body, "stream": True, "stream_options": {"include_usage": True}} if stream else body


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("path", "extra"), DIALECTS)
def test_a_request_alone_reports_batch_size_one_per_step(
    url: str, path: str, extra: dict[str, Any], stream: bool
) -> None:
    sizes, completion_tokens = _batch_sizes(url, path, _held(extra, stream, max_tokens=12))
    assert sizes == [1] * 12 and completion_tokens == 12


def test_concurrent_requests_report_the_batch_they_shared(url: str) -> None:
    cases = [(path, extra, stream) for path, extra in DIALECTS for stream in (False, True)]
    n, max_tokens = len(cases), 120
    start = threading.Barrier(n)
    got: dict[int, tuple[list[int], int]] = {}

    def client(i: int) -> None:
        path, extra, stream = cases[i]
        start.wait()
        got[i] = _batch_sizes(url, path, _held(extra, stream, max_tokens))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(got) == list(range(n))
    for sizes, completion_tokens in got.values():
        assert len(sizes) == completion_tokens == max_tokens
        assert all(1 <= s <= n for s in sizes) and sizes[max_tokens // 2] == n


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("path", "extra"), DIALECTS)
@pytest.mark.parametrize("flag", [None, False])
def test_no_batch_sizes_unless_asked(
    url: str, path: str, extra: dict[str, Any], stream: bool, flag: bool | None
) -> None:
    body = {**_held(extra, stream, max_tokens=4), "x_batch_sizes": flag}
    status, raw = _post(url, path, body)
    assert status == 200 and b"x_batch_sizes" not in raw
