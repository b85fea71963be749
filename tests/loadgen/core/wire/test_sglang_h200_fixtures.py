"""What a real SGLang 0.5.15 on an H200 answered (fixtures/sglang-0.5.15-h200/, captured by
``benchmarks/sglang_h200.sh fixtures`` from the default and the ``--enable-deterministic-inference`` server):
``/generate`` whole and streamed parse to the ids SGLang sent, the stream's frames count one token each,
``/v1/completions`` carries token strings and no ids, ``/metrics`` reads its running gauge, ``/get_server_info``
says the mode and how often that gauge is refreshed, and a cache flush under load is seen as refused. A burst sent
as one request (``sweep.burst_send = "one-request"``, captured 2026-12-04): a ``text`` list on
``/generate`` and a ``prompt`` list on ``/v1/completions``, split per prompt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from collectors.engine_metrics import parse_metrics
from loadgen.core.wire import Completion, StreamAccumulator, parse_body
from loadgen.core.wire.batch import parse_batch
from loadgen.core.wire.server_config import describe, server_settings
from loadgen.core.wire.sse import SSEDecoder
from loadgen.core.wire.sse_frames import FrameReader
from loadgen.load.cache_reset import reset_dropped

ROOT = Path(__file__).with_name("fixtures") / "sglang-0.5.15-h200"
MODES = ["default", "deterministic"]


def read(mode: str, name: str) -> bytes:
    return (ROOT / mode / name).read_bytes()


def events(mode: str) -> list[dict[str, Any]]:
    """The stream's JSON events, read independently of the tool's decoder."""
    body = read(mode, "generate-stream.txt").decode()
    return [orjson.loads(line[6:]) for line in body.splitlines() if line.startswith("data: {")]


@pytest.mark.parametrize("mode", MODES)
def test_whole_generate_gives_the_ids_and_logprobs_sglang_sent(mode: str) -> None:
    raw = orjson.loads(read(mode, "generate.json"))
    got = parse_body("generate", read(mode, "generate.json"))
    assert got.token_ids is not None and got.token_ids == raw["output_ids"] and len(got.token_ids) == 8
    assert got.logprobs == [entry[0] for entry in raw["meta_info"]["output_token_logprobs"]]
    assert got.top_logprobs is not None and all(len(alts) == 2 for alts in got.top_logprobs)
    assert got.finish_reason == "length"
    # with --enable-metrics the finished answer carries SGLang's own wall-clock times
    assert raw["meta_info"]["request_received_ts"] <= raw["meta_info"]["request_finished_ts"]


@pytest.mark.parametrize("mode", MODES)
def test_streamed_generate_is_cumulative_and_parses_to_its_last_event(mode: str) -> None:
    sent = events(mode)
    ids = [e["output_ids"] for e in sent]
    assert [len(x) for x in ids] == list(range(1, 9))  # every event repeats the whole output so far
    assert all(e["text"] for e in sent)  # and its whole text: none is deferred on the wire
    decoder, acc = SSEDecoder(), StreamAccumulator("generate")
    for event in decoder.feed(read(mode, "generate-stream.txt")):
        acc.add(event.data)
    assert acc.done
    got = acc.finish()
    assert got.token_ids == ids[-1] and got.text == sent[-1]["text"]


@pytest.mark.parametrize("mode", MODES)
def test_a_background_reader_counts_one_token_per_event(mode: str) -> None:
    reader = FrameReader("generate")
    body = read(mode, "generate-stream.txt")
    counted = sum(reader.feed(body[i : i + 500]) for i in range(0, len(body), 500))
    # each cumulative event is one token more however many ids it repeats; [DONE] one event more (the canary
    # path's rule: from the first token on, every event counts)
    assert reader.done and counted == len(events(mode)) + 1 == 9
    assert reader.finish().usage is not None


@pytest.mark.parametrize("mode", MODES)
def test_openai_completions_route_sends_strings_and_no_ids(mode: str) -> None:
    got = parse_body("completions", read(mode, "completions.json"))
    assert got.token_ids is None and got.tokens is not None and len(got.tokens) == 8


@pytest.mark.parametrize("mode", MODES)
def test_metrics_read_the_running_gauge(mode: str) -> None:
    busy = parse_metrics(read(mode, "metrics-busy.txt").decode())
    idle = parse_metrics(read(mode, "metrics-idle.txt").decode())
    assert busy["engine"] == idle["engine"] == "sglang"
    assert busy["running"] == 8.0  # the capture's eight 512-token requests
    assert idle["running"] == 0.0


def test_server_info_tells_the_modes_apart_and_how_fresh_the_gauge_is() -> None:
    default, det = (
        server_settings({}, None, orjson.loads(read(m, "server-info.json")), cached_tokens_reported=True) for m in MODES
    )
    assert default["batch_invariant"] is False and det["batch_invariant"] is True
    assert default["prefix_caching"] is True and default["attention_backend"] == "triton"
    assert default["metrics_refresh_steps"] == det["metrics_refresh_steps"] == 40  # decode_log_interval
    assert "batch-invariant on" in describe(det)


@pytest.mark.parametrize("mode", MODES)
def test_a_flush_under_load_is_refused_and_an_idle_one_done(mode: str) -> None:
    status, _, body = read(mode, "flush-busy.txt").partition(b"\n")
    assert int(status) == 400 and not reset_dropped(400, body)
    status, _, body = read(mode, "flush-idle.txt").partition(b"\n")
    assert int(status) == 200 and reset_dropped(200, body)


@pytest.mark.parametrize("mode", MODES)
def test_a_generate_prompt_list_splits_into_each_prompts_own_answer_and_usage(mode: str) -> None:
    raw = orjson.loads(read(mode, "generate-batch.json"))  # prompts: P, the first 40 characters of P, P
    parts = parse_batch("generate", read(mode, "generate-batch.json"), 3)
    assert all(isinstance(p, Completion) for p in parts)
    done = [p for p in parts if isinstance(p, Completion)]
    assert [p.token_ids for p in done] == [a["output_ids"] for a in raw]
    assert done[0].token_ids != done[1].token_ids  # each answer is its own prompt's, in prompt order
    assert [p.logprobs for p in done] == [[e[0] for e in a["meta_info"]["output_token_logprobs"]] for a in raw]
    # SGLang's native route gives each prompt its own usage: the prompt lengths and what each found cached
    usages = [p.usage for p in done]
    assert all(u is not None for u in usages)
    assert [u["prompt_tokens"] for u in usages if u] == [32, 19, 32]
    assert [u["prompt_tokens_details"]["cached_tokens"] for u in usages if u] == [
        a["meta_info"]["cached_tokens"] for a in raw
    ]


@pytest.mark.parametrize("mode", MODES)
def test_a_completions_prompt_list_splits_by_choice_index_with_no_usage_per_copy(mode: str) -> None:
    raw = orjson.loads(read(mode, "completions-batch.json"))
    parts = parse_batch("completions", read(mode, "completions-batch.json"), 3)
    done = [p for p in parts if isinstance(p, Completion)]
    assert len(done) == 3
    by_index = {c["index"]: c for c in raw["choices"]}
    assert [p.text for p in done] == [by_index[i]["text"] for i in range(3)]
    assert [p.tokens for p in done] == [by_index[i]["logprobs"]["tokens"] for i in range(3)]
    assert all(p.token_ids is None for p in done)  # the OpenAI route sends token strings only
    assert raw["usage"]["prompt_tokens"] == 83 and all(p.usage is None for p in done)  # summed over the prompts
