"""The two questions of RL users, asked of a real ``loadgen serve`` over HTTP, with known answers.

(1) A seeded sampled request gives the same tokens alone and beside other requests on a ``--batch-invariant``
engine (the others sent with it as one prompt list, so they share its steps), and ``n`` choices of one seeded
request are distinct, choice j being the request seeded ``seed + j`` alone. (2) A greedy completion's chosen-token
logprobs equal, bitwise, ``prompt_logprobs`` of the prompt ids followed by the output ids (the teacher-forced
re-score), in vLLM's shape. Mistakes with ``prompt_logprobs`` are 400s in vLLM's error shape.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.loadgen.engine.engine_http import post

PROMPT_IDS = [812, 1390, 77, 2045, 3310, 96, 1204, 588, 2999, 417, 1630, 2222, 905, 3100, 64, 1777, 2468, 350, 1001]
OTHERS = ["the old man and the sea at night", "A tired soldier built a small boat with his brother", "river song"]
SAMPLED = {"temperature": 1.0, "top_p": 0.95, "top_k": 50, "min_p": 0.01, "max_tokens": 16, "ignore_eos": True}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """``loadgen serve --port 0 --batch-invariant`` as a real process; its base URL."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "loadgen", "serve", "--port", "0", "--batch-invariant"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("READY http://127.0.0.1:"), line
        yield line.split(" ", 1)[1]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def _ok(url: str, body: dict[str, Any], path: str = "/v1/completions") -> dict[str, Any]:
    status, raw = post(url + path, body)
    assert status == 200, raw
    answer: dict[str, Any] = json.loads(raw)
    return answer


def _tokens(choice: dict[str, Any]) -> list[int]:
    return list(choice["token_ids"])


@pytest.mark.parametrize("seed", [0, 7, 2**40 + 3])
def test_a_seeded_sample_is_the_same_alone_and_beside_others(url: str, seed: int) -> None:
    body = {**SAMPLED, "seed": seed, "return_token_ids": True}
    alone = _ok(url, {**body, "prompt": PROMPT_IDS})["choices"][0]
    beside = _ok(url, {**body, "prompt": [PROMPT_IDS, *OTHERS]})["choices"]
    assert [c["index"] for c in beside] == [0, 1, 2, 3]
    assert _tokens(beside[0]) == _tokens(alone) and beside[0]["text"] == alone["text"]


def test_n_choices_of_a_seeded_request_are_distinct_and_each_is_seed_plus_index_alone(url: str) -> None:
    body = {**SAMPLED, "prompt": PROMPT_IDS, "return_token_ids": True}
    answer = _ok(url, {**body, "seed": 11, "n": 3})
    choices = answer["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2]
    assert len({tuple(_tokens(c)) for c in choices}) == 3
    for j, choice in enumerate(choices):
        assert _tokens(choice) == _tokens(_ok(url, {**body, "seed": 11 + j})["choices"][0])
    usage = answer["usage"]
    assert usage["prompt_tokens"] == len(PROMPT_IDS)  # a prompt is counted once, whatever n
    assert usage["completion_tokens"] == 3 * SAMPLED["max_tokens"]


def test_n_choices_on_chat_stream_each_open_with_a_role_chunk(url: str) -> None:
    body = {**SAMPLED, "messages": [{"role": "user", "content": "hello"}], "seed": 3, "n": 2, "stream": True}
    status, raw = post(url + "/v1/chat/completions", body)
    assert status == 200
    chunks = [json.loads(f.removeprefix("data: ")) for f in raw.decode().split("\n\n")[:-2]]
    roles = [c["choices"][0]["index"] for c in chunks if c["choices"] and "role" in c["choices"][0]["delta"]]
    assert roles == [0, 1]
    finished = {c["choices"][0]["index"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]}
    assert finished == {0, 1}


def test_the_rescore_of_a_greedy_completion_is_its_logprobs_bitwise(url: str) -> None:
    decode = _ok(
        url,
        {"prompt": PROMPT_IDS, "temperature": 0, "max_tokens": 24, "ignore_eos": True, "logprobs": 0}
        | {"return_token_ids": True},
    )["choices"][0]
    output = _tokens(decode)
    ids = PROMPT_IDS + output
    rescore = _ok(url, {"prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 3})["choices"][0]
    positions = rescore["prompt_logprobs"]
    assert len(positions) == len(ids) and positions[0] is None
    for i, entry in enumerate(positions[1:], start=1):
        given = entry[str(ids[i])]
        assert set(given) == {"logprob", "rank", "decoded_token"} and given["rank"] >= 1
        assert 3 <= len(entry) <= 4  # the given token, then the top 3 ranked 1..3 (it may be one of them)
        top = sorted((v["rank"], v["logprob"]) for v in entry.values() if v["rank"] <= 3)
        assert [r for r, _ in top] == [1, 2, 3] and [lp for _, lp in top] == sorted((lp for _, lp in top), reverse=True)
    rescored = [positions[len(PROMPT_IDS) + j][str(t)]["logprob"] for j, t in enumerate(output)]
    assert rescored == decode["logprobs"]["token_logprobs"]  # the same float32 values, serialised alike


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/v1/completions", {"prompt_logprobs": 21}, "Requested prompt logprobs of 21, which is greater than max"),
        ("/v1/completions", {"prompt_logprobs": -5}, "`prompt_logprobs` must be a positive value or -1."),
        ("/v1/completions", {"prompt_logprobs": 2, "stream": True}, "are not available when `stream=True`"),
        ("/v1/chat/completions", {"prompt_logprobs": 2}, "served on /v1/completions only"),
    ],
)
def test_prompt_logprobs_mistakes_are_400s_in_vllms_error_shape(
    url: str, path: str, body: dict[str, Any], message: str
) -> None:
    request = {"prompt": PROMPT_IDS} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "x"}]}
    status, raw = post(url + path, {**request, **body})
    error = json.loads(raw)["error"]
    assert status == 400 and error["code"] == 400 and error["type"] == "BadRequestError"
    assert error["param"] == "prompt_logprobs" and message in error["message"]
