"""The decode server's fetch goes only where it was told, and what it brings back harms no one (loadgen/engine/pd.py,
loadgen/engine/kvwire.py): real servers, a hostile peer.

Servers (real processes on free ports): ``H``, a hostile "prefill server" ``--kv-peers`` names
(tests/loadgen/engine/kv_peer.py: answers what a test staged, logs every contact); ``U``, another such server
that no engine names; ``D``, ``--role decode --kv-peers H``; ``B``, ``--role both`` with no peers; ``C``, a
fresh engine that only ever gets the plain requests ``D`` gets, in the same order: what ``D`` should answer.
A client may name any ``remote_host``/``remote_port`` in ``kv_transfer_params``: the engine must not become its
port scanner (a request that names an address not named at the start never reaches it), follow a peer's
redirect, or relay what a peer answered. A named peer may still send a KV no prefill made (NaN, infinities,
token ids past the vocabulary, a batch of 2^30): it is refused before it touches a slot or the prefix cache,
and every later answer, of that prompt or another, is what a fresh engine answers.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.engine.kvwire import MAGIC, HandedKV, Origin, encode
from loadgen.engine.runner import EngineOptions, build_scheduler
from loadgen.engine.sampling import SamplingParams
from loadgen.engine.scheduler import EngineRequest, Scheduler
from tests.loadgen.engine.engine_http import post
from tests.loadgen.serve_app import script_server

PEER = Path(__file__).with_name("kv_peer.py")


@dataclass(frozen=True)
class Servers:
    hostile: str  # H: named by D's --kv-peers
    unlisted: str  # U: named by nobody
    decode: str  # D
    both: str  # B
    fresh: str  # C


@pytest.fixture(scope="module")
def servers(engine_process: Any) -> Iterator[Servers]:
    with ExitStack() as stack:
        h, u = (stack.enter_context(script_server(PEER)) for _ in range(2))
        d = stack.enter_context(engine_process("--role", "decode", "--kv-peers", h.removeprefix("http://")))[0]
        b, c = (stack.enter_context(engine_process("--role", "both"))[0] for _ in range(2))
        yield Servers(h, u, d, b, c)


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def contacts(peer: str) -> list[str]:
    with urllib.request.urlopen(peer + "/contacts", timeout=10) as resp:
        found: list[str] = json.loads(resp.read())
        return found


def stage(peer: str, transfer_id: str, body: bytes, status: int = 200, location: str | None = None) -> None:
    query = f"?status={status}" + (f"&location={urllib.parse.quote(location, safe='')}" if location else "")
    req = urllib.request.Request(f"{peer}/stage/{transfer_id}{query}", data=body, method="PUT")
    with urllib.request.urlopen(req, timeout=10):
        pass


def decode_leg(server: str, host: str, port: int, transfer_id: str) -> tuple[int, str]:
    params = {"do_remote_prefill": True, "remote_engine_id": "peer", "remote_request_id": transfer_id}
    params |= {"remote_host": host, "remote_port": port, "remote_block_ids": [0], "tp_size": 1}
    body = {"model": "loadgen-tiny", "prompt": "the old man", "max_tokens": 4, "temperature": 0}
    status, raw = post(server + "/v1/completions", body | {"kv_transfer_params": params})
    return status, raw.decode(errors="replace")


@pytest.mark.parametrize("server", ["decode", "both"])
@pytest.mark.parametrize(
    ("host", "transfer_id"),
    [
        ("127.0.0.1", "cmpl-1"),
        ("localhost", "../../admin?x=1"),
        ("LOCALHOST", "%2e%2e/secret"),
        ("127.0.0.1", "a" * 300),
    ],
)
def test_a_decode_leg_naming_an_address_not_named_at_start_never_reaches_it(
    servers: Servers, server: str, host: str, transfer_id: str
) -> None:
    before = contacts(servers.unlisted)
    status, text = decode_leg(getattr(servers, server), host, port_of(servers.unlisted), transfer_id)
    assert status == 400, text
    message = json.loads(text)["error"]["message"]
    assert "fetches KV only from the prefill servers named at its start" in message
    assert ("--kv-peers names" if server == "decode" else "started without --kv-peers") in message
    assert contacts(servers.unlisted) == before  # not one byte went there


def test_the_listed_host_on_another_port_is_not_listed(servers: Servers) -> None:
    before = contacts(servers.unlisted)
    status, _ = decode_leg(servers.decode, "127.0.0.1", port_of(servers.unlisted), "cmpl-2")
    assert status == 400 and contacts(servers.unlisted) == before


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_peers_redirect_is_not_followed(servers: Servers, status: int) -> None:
    transfer_id = f"redirect-{status}-{uuid.uuid4().hex[:8]}"
    target = f"{servers.unlisted}/kv/{transfer_id}?engine_id=peer"
    stage(servers.hostile, transfer_id, b"moved", status=status, location=target)
    before = contacts(servers.unlisted)
    got, text = decode_leg(servers.decode, "127.0.0.1", port_of(servers.hostile), transfer_id)
    assert got == 502, text
    assert f"answered HTTP {status}" in json.loads(text)["error"]["message"]
    assert contacts(servers.unlisted) == before
    assert sum(c.startswith(f"/kv/{transfer_id}") for c in contacts(servers.hostile)) == 1


def _kv_header(header: dict[str, object], tail: bytes = b"") -> bytes:
    head = json.dumps(header).encode()
    return MAGIC + len(head).to_bytes(4, "little") + head + tail


def _one_token_kv(**fields: object) -> bytes:
    """A KV of a one-token prompt, right but for ``fields``."""
    header = {"prompt_token_ids": [1], "shape": [2, 2, 4, 1, 32], "dtype": "bf16", "first_token": 5}
    header |= {"first_logprob": None, "first_top": [], "batch_size": 1, "engine_id": "peer", "seed": 0}
    return _kv_header(header | {"batch_invariant": False} | fields, bytes(2 * 2 * 2 * 4 * 32))


@pytest.mark.parametrize(
    "answer",
    [
        lambda secret: (500, secret.encode()),
        lambda secret: (404, json.dumps({"error": {"message": secret}}).encode()),
        lambda secret: (418, secret.encode() * 100),
        lambda secret: (200, secret.encode()),  # no KV at all: it starts with the secret
        lambda secret: (200, _kv_header({"prompt_token_ids": [1, 2, 3], "shape": secret, "dtype": secret})),
        lambda secret: (200, _one_token_kv(first_token=secret)),
        lambda secret: (200, _one_token_kv(first_logprob=secret)),
        lambda secret: (200, _one_token_kv(batch_size=secret)),
    ],
    ids=["500", "404-json", "418-long", "garbage", "shape", "first_token", "first_logprob", "batch_size"],
)
def test_the_error_answer_holds_nothing_the_peer_sent(servers: Servers, answer: Any) -> None:
    secret = f"sk-peer-{uuid.uuid4().hex}"
    status, body = answer(secret)
    transfer_id = f"echo-{uuid.uuid4().hex[:8]}"
    stage(servers.hostile, transfer_id, body, status=status)
    got, text = decode_leg(servers.decode, "127.0.0.1", port_of(servers.hostile), transfer_id)
    assert got == 502, text
    message = json.loads(text)["error"]["message"]
    assert message.startswith(
        f"KV fetch failed: prefill server {servers.hostile} (engine peer, transfer {transfer_id})"
    )
    assert secret not in text and secret[:12] not in text and "sk-peer" not in text


@pytest.fixture(scope="module")
def prefiller() -> Scheduler:
    """A prefill of the engine's own model (``--seed 0``, as the servers'), in this process: real KV to poison."""
    return build_scheduler(EngineOptions())


def handed_kv(sched: Scheduler, text: str) -> HandedKV:
    ids = sched.tokenizer.encode(text)
    sched.add(EngineRequest("p", ids, SamplingParams(max_tokens=1, temperature=0, logprobs=2), hand_over=True))
    handed = [d.handed for d in sched.step() if d.handed is not None]
    while sched.has_work:
        sched.step()
    return handed[0]


def _spot(kv: HandedKV, seed: int) -> tuple[int, ...]:
    return tuple(int(np.random.default_rng(seed).integers(0, n)) for n in kv.k.shape)


def _set(kv: HandedKV, which: str, value: float, seed: int) -> HandedKV:
    arr = getattr(kv, which).copy()
    arr[_spot(kv, seed)] = value
    return replace(kv, **{which: arr})


POISONS: dict[str, tuple[Callable[[HandedKV, int], HandedKV], str]] = {
    "nan-in-k": (lambda kv, seed: _set(kv, "k", np.nan, seed), "finite"),
    "inf-in-v": (lambda kv, seed: _set(kv, "v", np.inf, seed), "finite"),
    "-inf-in-k": (lambda kv, seed: _set(kv, "k", -np.inf, seed), "finite"),
    "top-id-past-vocab": (lambda kv, seed: replace(kv, first_top=((4303 + seed, -0.5),)), "first_top"),
    "top-id-negative": (lambda kv, seed: replace(kv, first_top=((-1 - seed, -0.5),)), "first_top"),
    "top-too-long": (lambda kv, seed: replace(kv, first_top=tuple((i, -1.0) for i in range(21 + seed))), "first_top"),
    "batch-of-2^30": (lambda kv, seed: replace(kv, batch_size=(1 << 30) + seed), "batch_size"),
}


def plain(server: str, text: str) -> dict[str, Any]:
    body = {"model": "loadgen-tiny", "prompt": text, "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    status, raw = post(server + "/v1/completions", body | {"logprobs": 2})
    assert status == 200, raw[:300]
    choice: dict[str, Any] = json.loads(raw)["choices"][0]
    return {key: choice[key] for key in ("text", "logprobs", "finish_reason")}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
@pytest.mark.parametrize("poison", sorted(POISONS))
def test_a_poisoned_kv_is_refused_and_every_later_answer_is_a_fresh_engines(
    servers: Servers, prefiller: Scheduler, poison: str, temperature: float, seed: int
) -> None:
    tag = uuid.uuid4().hex[:6]
    text, other = f"{tag} the king saw a boat {poison} on the river", f"{tag} an old song in the night"
    mangle, says = POISONS[poison]
    transfer_id = f"poison-{tag}"
    stage(servers.hostile, transfer_id, encode(mangle(handed_kv(prefiller, text), seed), Origin("peer", 0, False)))
    params = {"do_remote_prefill": True, "remote_engine_id": "peer", "remote_request_id": transfer_id}
    params |= {"remote_host": "127.0.0.1", "remote_port": port_of(servers.hostile)}
    body = {"model": "loadgen-tiny", "prompt": text, "max_tokens": 8, "temperature": temperature, "seed": seed}
    status, raw = post(servers.decode + "/v1/completions", body | {"kv_transfer_params": params})
    # another client, after it: the poisoned prompt itself and an unrelated one, as a fresh engine answers them
    for prompt in (text, other):
        assert plain(servers.decode, prompt) == plain(servers.fresh, prompt)
    with urllib.request.urlopen(servers.decode + "/health", timeout=10) as resp:
        assert resp.status == 200
    assert status == 502, raw[:300]
    message = json.loads(raw)["error"]["message"]
    assert "sent an unusable KV" in message and says in message
