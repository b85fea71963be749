"""The whole disaggregated pipeline on CPU: the real vllm-router (PD mode) in front of embedded prefill and decode
servers, against a colocated ``--role both`` server with the same kernel settings; and the decode server's faults.

Servers (real processes on free ports, started here): ``P`` a prefill server, ``F`` a prefill server with foreign
kernels (``--batch-invariant``: one reduction order where the others split), ``D`` a decode server, ``C`` a
colocated server; all with prefix caching off, so that every prefill is a whole one. Routers: ``P``+``D`` and
``F``+``D``. Bodies are built by the load tool's own ``build_body`` and read by its own parsers.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.core.wire.request import build_body
from loadgen.core.wire.response import StreamAccumulator, parse_body
from loadgen.core.wire.types import Completion, Features, Kind
from loadgen.engine.kvwire import HandedKV, ModelShape, decode
from loadgen.engine.prompts import D3_SHORT_PROMPT
from tests.loadgen.engine.engine_http import post
from tests.loadgen.engine.pd_processes import free_port, router_available, start_router
from tests.loadgen.serve_app import script_server

pytestmark = pytest.mark.skipif(
    not router_available(), reason="vllm-router is not installed (pip install '.[test]' brings vllm-router==0.1.17)"
)

FETCH_TIMEOUT_S = 2.0
FEATURES = Features(return_token_ids=True, logprobs=True, top_logprobs=2, include_usage=True, batch_sizes=True)
MODEL = ModelShape(layers=2, heads=4, head_dim=32, vocab=4303, max_len=512)
RECORDER = Path(__file__).with_name("pd_recorder.py")


@dataclass(frozen=True)
class Setup:
    prefill: str
    foreign: str
    decode: str
    colocated: str
    router: str
    foreign_router: str
    recorder: str
    garbage_router: str
    down: int  # a port --kv-peers names where nothing listens


@pytest.fixture(scope="module")
def pd(engine_process: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    logs = tmp_path_factory.mktemp("pd")
    with ExitStack() as stack:
        common = ("--no-enable-prefix-caching",)
        p, f, c = [
            stack.enter_context(engine_process(*flags, *common))[0]
            for flags in (("--role", "prefill"), ("--role", "prefill", "--batch-invariant"), ("--role", "both"))
        ]
        rec = stack.enter_context(script_server(RECORDER, "--role", "prefill", "--log", str(logs / "recorder.jsonl")))
        down = free_port()
        peers = ",".join([*(url.removeprefix("http://") for url in (p, f, rec)), f"127.0.0.1:{down}"])
        decode_flags = ("--role", "decode", "--kv-fetch-timeout", str(FETCH_TIMEOUT_S), "--kv-peers", peers)
        d = stack.enter_context(engine_process(*decode_flags, *common))[0]
        router = stack.enter_context(start_router([p], [d], logs / "router.log"))
        foreign_router = stack.enter_context(start_router([f], [d], logs / "foreign-router.log"))
        garbage_router = stack.enter_context(start_router([rec], [d], logs / "garbage-router.log"))
        yield Setup(p, f, d, c, router, foreign_router, rec, garbage_router, down)


def _body(kind: Kind, stream: bool, text: str = D3_SHORT_PROMPT, max_tokens: int = 16) -> dict[str, Any]:
    return build_body(
        kind,
        model="loadgen-tiny",
        prompt=text if kind == "completions" else None,
        messages=[{"role": "user", "content": text}] if kind == "chat" else None,
        max_tokens=max_tokens,
        seed=0,
        stream=stream,
        features=FEATURES,
    )


def _complete(base: str, kind: Kind, stream: bool, text: str = D3_SHORT_PROMPT) -> Completion:
    path = "/v1/completions" if kind == "completions" else "/v1/chat/completions"
    status, raw = post(base + path, _body(kind, stream, text))
    assert status == 200, raw[:500]
    if not stream:
        return parse_body(kind, raw)
    acc = StreamAccumulator(kind)
    for frame in raw.decode().split("\n\n"):
        if frame.startswith("data: "):
            acc.add(frame[6:])
    assert acc.done
    return acc.finish()


def _f32(values: list[float] | None) -> list[np.float32]:
    """Logprobs at the engine's precision: the router re-serialises a non-streamed body, and its JSON parse moves
    some doubles by one unit in the last place (serde_json without ``float_roundtrip``); float32 is unchanged."""
    assert values is not None
    return [np.float32(v) for v in values]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("kind", ["completions", "chat"])
def test_the_router_and_two_servers_answer_as_one_colocated_server(pd: Setup, kind: Kind, stream: bool) -> None:
    routed, colocated = _complete(pd.router, kind, stream), _complete(pd.colocated, kind, stream)
    assert routed.token_ids is not None and len(routed.token_ids) == 16
    assert (routed.token_ids, routed.text, routed.finish_reason) == (
        colocated.token_ids,
        colocated.text,
        colocated.finish_reason,
    )
    assert _f32(routed.logprobs) == _f32(colocated.logprobs)
    assert routed.top_logprobs is not None and colocated.top_logprobs is not None
    assert [[t for t, _ in top] for top in routed.top_logprobs] == [
        [t for t, _ in top] for top in colocated.top_logprobs
    ]
    # the decode server's account: the prefill server's step (alone: 1), then one entry per decode step
    assert routed.batch_sizes == [1] * 16
    assert routed.usage is not None and routed.usage["prompt_tokens_details"] == {"cached_tokens": 0}


def _prefill_leg(base: str, text: str = D3_SHORT_PROMPT) -> dict[str, Any]:
    body = _body("completions", False, text, max_tokens=1) | {"kv_transfer_params": {"do_remote_decode": True}}
    status, raw = post(base + "/v1/completions", body)
    assert status == 200, raw[:500]
    params: dict[str, Any] = json.loads(raw)["kv_transfer_params"]
    return params


def _fetch_kv(params: dict[str, Any]) -> HandedKV:
    url = f"http://{params['remote_host']}:{params['remote_port']}/kv/{params['remote_request_id']}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return decode(resp.read(), MODEL)[0]


def _bits(kv: HandedKV) -> bytes:
    return kv.k.tobytes() + kv.v.tobytes()


def test_a_prefill_answer_names_its_side_channel_in_vllms_fields(pd: Setup) -> None:
    params = _prefill_leg(pd.prefill)
    assert set(params) == {
        "do_remote_prefill",
        "do_remote_decode",
        "remote_block_ids",
        "remote_engine_id",
        "remote_request_id",
        "remote_host",
        "remote_port",
        "tp_size",
    }
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    assert f"http://{params['remote_host']}:{params['remote_port']}" == pd.prefill
    assert params["remote_block_ids"] == [0, 1]  # 24 tokens: two 16-token blocks
    kv = _fetch_kv(params)
    assert kv.k.shape == (2, 4, 24, 32) and kv.batch_size == 1
    status, raw = post(pd.decode + "/v1/completions", _body("completions", False) | {"kv_transfer_params": params})
    assert status == 502 and b"already fetched" in raw and pd.prefill.encode() in raw  # freed once fetched


def test_same_settings_hand_over_the_colocated_servers_own_kv(pd: Setup) -> None:
    """The prefill server's KV, bit for bit, is what the colocated server's own prefill leaves (``--role both``
    serves prefill legs too), over several prompts."""
    for text in (D3_SHORT_PROMPT, "the old man", "The king walked to the river in the early morning. He saw a boat"):
        assert _bits(_fetch_kv(_prefill_leg(pd.prefill, text))) == _bits(_fetch_kv(_prefill_leg(pd.colocated, text)))


def test_a_foreign_kernel_prefill_changes_the_kv_and_the_decoders_answer(pd: Setup) -> None:
    same, foreign = _fetch_kv(_prefill_leg(pd.prefill)), _fetch_kv(_prefill_leg(pd.foreign))
    assert _bits(same) != _bits(foreign)
    assert np.abs(same.k - foreign.k).max() < 0.1  # the same prefill, rounded in another order
    own = _complete(pd.decode, "completions", False)  # the decode server's own prefill
    routed = _complete(pd.foreign_router, "completions", False)
    assert (routed.token_ids, _f32(routed.logprobs)) != (own.token_ids, _f32(own.logprobs))
    assert (_complete(pd.router, "completions", False).token_ids) == own.token_ids


def _decode_leg(pd: Setup, port: int, transfer_id: str) -> tuple[int, dict[str, Any], float]:
    params = {"do_remote_prefill": True, "remote_engine_id": "loadgen-gone", "remote_request_id": transfer_id}
    params |= {"remote_host": "127.0.0.1", "remote_port": port, "remote_block_ids": [0, 1], "tp_size": 1}
    start = time.monotonic()
    status, raw = post(pd.decode + "/v1/completions", _body("completions", False) | {"kv_transfer_params": params})
    return status, json.loads(raw), time.monotonic() - start


def test_a_prefill_server_that_is_down_is_an_error_naming_it(pd: Setup) -> None:
    port = pd.down
    status, body, took = _decode_leg(pd, port, "cmpl-1")
    assert status == 502 and took < FETCH_TIMEOUT_S
    assert f"prefill server http://127.0.0.1:{port} (engine loadgen-gone, transfer cmpl-1)" in body["error"]["message"]


def test_a_prefill_server_answering_garbage_is_an_error_naming_it(pd: Setup) -> None:
    status, body, _ = _decode_leg(pd, int(pd.recorder.rsplit(":", 1)[1]), "cmpl-1")
    assert status == 502
    assert f"prefill server {pd.recorder}" in body["error"]["message"]
    assert "unusable KV: not a KV transfer" in body["error"]["message"]


def test_a_prefill_server_that_never_answers_is_a_timeout_within_the_deadline(pd: Setup) -> None:
    status, body, took = _decode_leg(pd, int(pd.recorder.rsplit(":", 1)[1]), "slow-1")
    assert status == 504 and FETCH_TIMEOUT_S <= took < FETCH_TIMEOUT_S + 3
    assert f"no KV from prefill server {pd.recorder}" in body["error"]["message"]


def test_through_the_router_a_garbage_prefill_reaches_the_client_as_the_decoders_error(pd: Setup) -> None:
    status, raw = post(pd.garbage_router + "/v1/completions", _body("completions", False))
    assert status == 502
    assert f"prefill server {pd.recorder}" in json.loads(raw)["error"]["message"]


@pytest.mark.parametrize(
    ("server", "params", "says"),
    [
        ("decode", {"do_remote_decode": True}, "this server is a decode server (--role decode)"),
        ("prefill", {"do_remote_prefill": True}, "this server is a prefill server (--role prefill)"),
    ],
)
def test_a_leg_the_role_does_not_serve_is_a_400_naming_the_role(
    pd: Setup, server: str, params: dict[str, Any], says: str
) -> None:
    status, raw = post(
        getattr(pd, server) + "/v1/completions", _body("completions", False) | {"kv_transfer_params": params}
    )
    assert status == 400 and says in json.loads(raw)["error"]["message"]


def test_a_streamed_prefill_leg_is_refused(pd: Setup) -> None:
    body = _body("completions", True) | {"kv_transfer_params": {"do_remote_decode": True}}
    status, raw = post(pd.prefill + "/v1/completions", body)
    assert status == 400 and b"needs stream false" in raw


def test_the_render_routes_answer_the_prompts_token_ids(pd: Setup) -> None:
    for path, body in (
        ("/v1/completions/render", _body("completions", False)),
        ("/v1/chat/completions/render", _body("chat", False)),
    ):
        status, raw = post(pd.decode + path, body)
        assert status == 200
        got = json.loads(raw)
        rendered = got[0] if isinstance(got, list) else got
        assert rendered["token_ids"] and rendered["model"] == "loadgen-tiny"
        assert rendered["sampling_params"]["max_tokens"] == 16


FIXTURES = Path(__file__).with_name("fixtures") / "vllm-router-0.1.17"


@pytest.mark.parametrize("case", ["completions", "chat", "completions_stream", "chat_stream"])
def test_the_engine_answers_what_the_router_was_captured_sending(pd: Setup, case: str) -> None:
    """Replay the captured calls (the model renamed to this engine's): the render call, then the prefill leg to a
    prefill server, whose kv_transfer_params carry the fields the router was seen passing to the decode leg."""
    calls = json.loads((FIXTURES / f"{case}.json").read_text())["router_calls"]
    assert calls[0]["path"].endswith("/render") and calls[-1]["role"] == "decode"  # the decode leg comes last
    render, prefill_leg, decode_leg = (
        next(c for c in calls if c["role"] == role and c["path"].endswith("/render") == is_render)
        for role, is_render in (("prefill", True), ("prefill", False), ("decode", False))
    )
    status, _ = post(pd.prefill + render["path"], render["body"] | {"model": "loadgen-tiny"})
    assert status == 200
    status, raw = post(pd.prefill + prefill_leg["path"], prefill_leg["body"] | {"model": "loadgen-tiny"})
    assert status == 200, raw[:300]
    assert set(json.loads(raw)["kv_transfer_params"]) == set(decode_leg["body"]["kv_transfer_params"])
