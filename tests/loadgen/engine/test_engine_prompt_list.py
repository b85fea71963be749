"""``/v1/completions`` with a list of prompts, over real HTTP: one choice per prompt, every prompt in the same steps.

The comparison with the prompts sent one at a time runs on a ``--batch-invariant`` engine: by default a prompt's
numerics depend on what shares its steps (docs/engine.md), so a batch of three may rightly answer otherwise than
each prompt alone; in invariant mode any difference would be the route's own.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from loadgen.engine.prompts import D3_SHORT_PROMPT
from loadgen.engine.protocol import MAX_PROMPTS
from tests.loadgen.engine.engine_http import post

PROMPTS = [D3_SHORT_PROMPT, "the old man and the sea", "A tired soldier built a small boat"]
HELD = {"temperature": 0, "ignore_eos": True, "return_token_ids": True, "logprobs": 2, "x_batch_sizes": True}


@pytest.fixture(scope="module")
def url(engine_process: Any) -> Iterator[str]:
    with engine_process() as (base, _proc):
        yield base


@pytest.fixture(scope="module")
def invariant(engine_process: Any) -> Iterator[str]:
    with engine_process("--batch-invariant") as (base, _proc):
        yield base


def _post(url: str, body: Any, path: str = "/v1/completions") -> tuple[int, bytes]:
    return post(url + path, body)


def _ok(url: str, body: Any) -> dict[str, Any]:
    status, raw = _post(url, body)
    assert status == 200, raw
    answer: dict[str, Any] = json.loads(raw)
    return answer


def _sse(raw: bytes) -> list[Any]:
    frames = raw.decode().split("\n\n")
    assert frames[-1] == "" and frames[-2] == "data: [DONE]" and "data: [DONE]" not in frames[:-2]
    return [json.loads(f.removeprefix("data: ")) for f in frames[:-2]]


def _metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(name)


def test_a_list_answers_as_its_prompts_sent_one_at_a_time(invariant: str) -> None:
    body = {**HELD, "max_tokens": 12, "cache_salt": "prompt-list"}
    for _ in range(2):  # the second round hits the blocks the first cached, as the list will
        singles = [_ok(invariant, {**body, "prompt": p}) for p in PROMPTS]
    assert all(s["x_batch_sizes"] == [1] * 12 for s in singles)
    listed = _ok(invariant, {**body, "prompt": PROMPTS})
    assert "x_batch_sizes" not in listed  # with several prompts it is on each choice
    assert [c["index"] for c in listed["choices"]] == [0, 1, 2]
    for i, (choice, single) in enumerate(zip(listed["choices"], singles, strict=True)):
        assert choice.pop("x_batch_sizes") == [3] * 12  # prefilled together, decoded together to the end
        assert choice == {**single["choices"][0], "index": i}  # text, token ids, logprobs, finish: bitwise
    usage, alone = listed["usage"], [s["usage"] for s in singles]
    assert usage["prompt_tokens"] == sum(u["prompt_tokens"] for u in alone)
    assert usage["completion_tokens"] == 36 and usage["total_tokens"] == usage["prompt_tokens"] + 36
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in alone)
    assert usage["prompt_tokens_details"] == {"cached_tokens": cached} and cached > 0


def test_a_list_of_token_id_lists(invariant: str) -> None:
    texts = ["the river at night", "a song of the king"]
    singles = [_ok(invariant, {**HELD, "max_tokens": 6, "prompt": t})["choices"][0] for t in texts]
    ids = [s["prompt_token_ids"] for s in singles]
    listed = _ok(invariant, {**HELD, "max_tokens": 6, "prompt": ids})["choices"]
    assert [c["prompt_token_ids"] for c in listed] == ids
    assert [(c["text"], c["token_ids"]) for c in listed] == [(s["text"], s["token_ids"]) for s in singles]


def test_a_one_element_list_is_one_prompt(url: str) -> None:
    listed = _ok(url, {**HELD, "max_tokens": 4, "prompt": ["the sea"]})
    plain = _ok(url, {**HELD, "max_tokens": 4, "prompt": "the sea"})
    assert [c["index"] for c in listed["choices"]] == [0]
    assert listed["x_batch_sizes"] == [1] * 4 and "x_batch_sizes" not in listed["choices"][0]
    assert listed["choices"] == plain["choices"] and listed["usage"] == plain["usage"]


def test_a_streamed_list_sends_each_prompt_under_its_index(url: str) -> None:
    prompts = ["the old man", "the river", "a small boat at night"]  # under 16 tokens: no prefix-cache hit
    body = {**HELD, "max_tokens": 10, "prompt": prompts}
    full = _ok(url, body)
    status, raw = _post(url, {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert status == 200
    chunks = _sse(raw)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == full["usage"]  # summed over the prompts
    assert all(len(c["choices"]) == 1 and "x_batch_sizes" not in c for c in chunks[:-1])
    for i, want in enumerate(full["choices"]):
        mine = [c["choices"][0] for c in chunks[:-1] if c["choices"][0]["index"] == i]
        assert mine[0]["prompt_token_ids"] == want["prompt_token_ids"]
        assert all(c["prompt_token_ids"] is None for c in mine[1:])
        assert "".join(c["text"] for c in mine) == want["text"]
        assert [t for c in mine for t in c["token_ids"]] == want["token_ids"]
        assert [x for c in mine for x in c["logprobs"]["token_logprobs"]] == want["logprobs"]["token_logprobs"]
        assert [x for c in mine for x in c["logprobs"]["text_offset"]] == want["logprobs"]["text_offset"]
        assert [c["finish_reason"] for c in mine] == [None] * (len(mine) - 1) + ["length"]
        assert [c.get("x_batch_sizes") for c in mine] == [None] * (len(mine) - 1) + [[3] * 10]


@pytest.mark.parametrize(
    ("prompt", "param", "words"),
    [
        (["the sea", "", "the river"], "prompt[1]", "'prompt[1]' must be a non-empty string"),
        (["the sea", [1, 2], [5000]], "prompt[2]", "'prompt[2]' must be"),
        (["the sea", "the river", [7] * 600], "prompt[2]", "(600 in prompt[2], 16 in the completion)"),
        ([], "prompt", "'prompt' must be"),
        (["a"] * (MAX_PROMPTS + 1), "prompt", f"at most {MAX_PROMPTS} prompts; got {MAX_PROMPTS + 1}"),
    ],
)
def test_mistakes_in_a_list_name_the_prompt(url: str, prompt: Any, param: str, words: str) -> None:
    status, raw = _post(url, {"prompt": prompt})
    error = json.loads(raw)["error"]
    assert (status, error["param"], error["code"]) == (400, param, 400)
    assert words in error["message"]


def test_a_hand_over_takes_one_prompt(url: str) -> None:
    status, raw = _post(url, {"prompt": ["the sea", "the river"], "kv_transfer_params": {"do_remote_decode": True}})
    error = json.loads(raw)["error"]
    assert (status, error["param"]) == (400, "kv_transfer_params") and "single prompt" in error["message"]


def test_the_render_route_answers_one_entry_per_prompt(url: str) -> None:
    status, raw = _post(url, {"prompt": ["the sea", [5, 6]], "request_id": "r"}, "/v1/completions/render")
    assert status == 200
    rendered = json.loads(raw)
    assert [r["request_id"] for r in rendered] == ["cmpl-r-0", "cmpl-r-1"]
    assert rendered[1]["token_ids"] == [5, 6]


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_gone_aborts_every_prompt(url: str, stream: bool) -> None:
    parts = urlsplit(url)
    body = {"prompt": ["the sea", "the king", "the town"], "max_tokens": 400, "ignore_eos": True, "stream": stream}
    raw = json.dumps(body).encode()
    sock = socket.create_connection((parts.hostname, parts.port))
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(raw)}\r\n\r\n".encode()
        + raw
    )
    received = b""
    while stream and b"data: " not in received:
        received += sock.recv(4096)
    deadline = time.monotonic() + 10
    while _metric(url, "vllm:num_requests_running") < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _metric(url, "vllm:num_requests_running") == 3
    sock.close()
    deadline = time.monotonic() + 10
    while _metric(url, "vllm:num_requests_running") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _metric(url, "vllm:num_requests_running") == 0


def test_a_fault_is_drawn_once_for_the_whole_list(engine_process: Any) -> None:
    with engine_process("--fault-missing-ids-rate", "1") as (base, _proc):
        answer = _ok(base, {**HELD, "max_tokens": 3, "prompt": PROMPTS})
        assert [c["index"] for c in answer["choices"]] == [0, 1, 2]
        assert all("token_ids" not in c and "prompt_token_ids" not in c for c in answer["choices"])
        assert _metric(base, "loadgen:generation_requests_total") == 1
        assert _metric(base, 'loadgen:faults_injected_total{kind="missing_ids"}') == 1
