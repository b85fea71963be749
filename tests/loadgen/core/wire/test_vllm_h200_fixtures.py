"""What a real vLLM 0.26 server on an H200 answered (fixtures/vllm-0.26-h200/, see its README): the body and
the stream parse to the same tokens, a refused prefix-cache reset is seen as refused, /metrics reads."""

from __future__ import annotations

import itertools
from pathlib import Path

import orjson
import pytest

from collectors.engine_metrics import parse_metrics
from loadgen.core.wire import Completion, StreamAccumulator, parse_body
from loadgen.core.wire.sse import SSEDecoder
from loadgen.load.cache_reset import reset_dropped

H200 = Path(__file__).with_name("fixtures") / "vllm-0.26-h200"

# default-completion.json: max_tokens 8, logprobs 2, return_token_ids; the stream: the same prompt, max_tokens 4
TOKENS = [" eca", " bqwpj", "uyx", "rao", "vkn", " qge", "xci", "txu"]
IDS = [11753, 31656, 4144, 3904, 19241, 10748, 8442, 4281]
LOGPROBS = [
    -7.055128574371338,
    -7.341943740844727,
    -7.26915168762207,
    -7.208193302154541,
    -7.370701789855957,
    -7.222164154052734,
    -6.7750020027160645,
    -7.042608737945557,
]
STREAMED = 4


def read(name: str) -> bytes:
    return (H200 / name).read_bytes()


def stream(chunks: list[bytes]) -> tuple[Completion, list[bool]]:
    decoder = SSEDecoder()
    acc = StreamAccumulator("completions")
    carried: list[bool] = []
    for chunk in chunks:
        carried.extend(acc.add(event.data) for event in decoder.feed(chunk))
    carried.extend(acc.add(event.data) for event in decoder.flush())
    assert acc.done
    return acc.finish(), carried


def test_real_completion_body_gives_ids_tokens_and_logprobs() -> None:
    got = parse_body("completions", read("default-completion.json"))
    assert got.token_ids == IDS
    assert got.tokens == TOKENS
    assert got.logprobs == LOGPROBS
    assert got.text == "".join(TOKENS)
    assert got.finish_reason == "length"
    assert got.top_logprobs is not None and len(got.top_logprobs) == len(TOKENS)
    assert got.top_logprobs[0] == [(" eca", -7.055128574371338), (" ckr", -7.164503574371338)]
    # a real tie at position 3: both alternatives kept, the chosen token first
    assert got.top_logprobs[3] == [("rao", -7.208193302154541), (" clp", -7.208193302154541)]
    # the default server ran without --enable-prompt-tokens-details: no cached-token count
    assert got.usage == {"prompt_tokens": 46, "total_tokens": 54, "completion_tokens": 8, "prompt_tokens_details": None}


def test_real_stream_gives_the_same_tokens_and_logprobs_as_the_body() -> None:
    body = parse_body("completions", read("default-completion.json"))
    got, carried = stream([read("default-completion-stream.txt")])
    assert body.tokens is not None and body.logprobs is not None and body.top_logprobs is not None
    assert got.tokens == body.tokens[:STREAMED]
    assert got.logprobs == body.logprobs[:STREAMED]
    assert got.top_logprobs == body.top_logprobs[:STREAMED]
    assert got.text == "".join(TOKENS[:STREAMED])
    assert got.finish_reason == "length"
    assert got.token_ids is None  # the stream was asked without return_token_ids: "token_ids": null per chunk
    assert got.usage == {"prompt_tokens": 46, "total_tokens": 50, "completion_tokens": 4}
    # one token per chunk, then the usage-only chunk (choices: []); [DONE] is no token either
    assert carried == [True] * STREAMED + [False, False]


def test_real_stream_parses_the_same_however_it_is_split() -> None:
    raw = read("default-completion-stream.txt")
    whole, _ = stream([raw])
    for offset in range(len(raw) + 1):
        assert stream([raw[:offset], raw[offset:]])[0] == whole, offset
    assert stream([raw[i : i + 1] for i in range(len(raw))])[0] == whole
    cuts = [0, 7, 300, 301, 900, len(raw)]
    assert stream([raw[a:b] for a, b in itertools.pairwise(cuts)])[0] == whole


def test_real_models_answer_names_the_served_model() -> None:
    models = orjson.loads(read("default-models.json"))
    assert [m["id"] for m in models["data"]] == ["tiny-qwen3"]
    assert models["data"][0]["max_model_len"] == 4096


# --- POST /reset_prefix_cache -------------------------------------------------------------------


def test_captured_busy_reset_is_not_a_dropped_cache() -> None:
    """vLLM 0.26 refuses a reset while requests run, with HTTP 200 and {"success":false}."""
    status = int(read("default-reset-busy.status").decode().strip())
    body = read("default-reset-busy.body")
    assert status == 200 and orjson.loads(body) == {"success": False}
    assert reset_dropped(status, body) is False


@pytest.mark.parametrize("body", [b"", b"\n", b"  ", b'{"success":true}', b'{"success": true}', b"null", b"{}"])
def test_a_2xx_reset_without_a_refusal_dropped_the_cache(body: bytes) -> None:
    assert reset_dropped(200, body) is True
    assert reset_dropped(204, body) is True


def test_a_2xx_reset_with_a_body_that_is_not_json_dropped_the_cache() -> None:
    assert reset_dropped(200, b"OK") is True


@pytest.mark.parametrize("status", [409, 500, 503, 404, 301, 199, None])
@pytest.mark.parametrize("body", [b"", b'{"success":true}', b'{"success":false}'])
def test_a_reset_answered_with_anything_but_2xx_dropped_nothing(status: int | None, body: bytes) -> None:
    assert reset_dropped(status, body) is False


def test_only_an_explicit_false_is_a_refusal() -> None:
    assert reset_dropped(200, b'{"success": 0}') is True
    assert reset_dropped(200, b'{"success": null}') is True
    assert reset_dropped(200, b'{"success": false, "message": "requests running"}') is False


# --- /metrics -----------------------------------------------------------------------------------


def test_busy_metrics_show_running_requests_and_prefix_cache_counters() -> None:
    gauges = parse_metrics(read("default-metrics-busy.txt").decode())
    assert gauges["engine"] == "vllm"
    running = gauges["running"]
    assert running is not None and running > 0
    assert running == 8.0  # the eight busy requests sent around the reset
    assert gauges["waiting"] == 0.0
    assert gauges["prefix_cache_queries"] == 140.0
    assert gauges["prefix_cache_hits"] == 32.0
    hits, queries = gauges["prefix_cache_hits"], gauges["prefix_cache_queries"]
    assert 0 < hits <= queries


def test_idle_metrics_show_nothing_running_and_untouched_counters() -> None:
    gauges = parse_metrics(read("default-metrics-idle.txt").decode())
    assert gauges["engine"] == "vllm"
    assert gauges["running"] == 0.0 and gauges["waiting"] == 0.0
    assert gauges["prefix_cache_queries"] == 0.0 and gauges["prefix_cache_hits"] == 0.0
