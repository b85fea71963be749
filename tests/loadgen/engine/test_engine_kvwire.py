"""The handed-over KV's bytes (loadgen/engine/kvwire.py) and the prefill side's store (loadgen/engine/transfers.py)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.engine.kernels import to_bf16
from loadgen.engine.kvwire import MAGIC, HandedKV, KVWireError, ModelShape, Origin, decode, encode
from loadgen.engine.transfers import TransferStore

MODEL = ModelShape(layers=2, heads=4, head_dim=32, vocab=4303, max_len=512)
ORIGIN = Origin("loadgen-test", 0, False)


def _kv(tokens: int, seed: int, vocab: int = MODEL.vocab) -> HandedKV:
    rng = np.random.default_rng(seed)
    shape = (MODEL.layers, MODEL.heads, tokens, MODEL.head_dim)
    raw = (rng.standard_normal((2, *shape)) * 4).astype(np.float32)
    raw[0, 0, 0, 0, :4] = [0.0, -0.0, 255.0, -(2.0**-12)]  # zeros, the saturation edge, the flush edge
    k, v = to_bf16(raw[0]), to_bf16(raw[1])
    ids = tuple(int(t) for t in rng.integers(0, vocab, tokens))
    return HandedKV(ids, k, v, int(rng.integers(0, vocab)), -0.5, ((7, -0.5), (9, -1.25)), 3)


@settings(max_examples=25, deadline=None)
@given(tokens=st.integers(1, 200), seed=st.integers(0, 2**32 - 1))
def test_the_bytes_carry_the_kv_bit_for_bit(tokens: int, seed: int) -> None:
    kv = _kv(tokens, seed)
    got, origin = decode(encode(kv, ORIGIN), MODEL)
    assert origin == ORIGIN
    assert got.k.view(np.uint32).tobytes() == kv.k.view(np.uint32).tobytes()  # -0.0 stays -0.0
    assert got.v.view(np.uint32).tobytes() == kv.v.view(np.uint32).tobytes()
    assert (got.prompt_ids, got.first_token, got.first_logprob, got.first_top, got.batch_size) == (
        kv.prompt_ids,
        kv.first_token,
        kv.first_logprob,
        kv.first_top,
        kv.batch_size,
    )


def test_two_bytes_a_value() -> None:
    kv = _kv(24, 1)
    assert len(encode(kv, ORIGIN)) - 2 * 2 * kv.k.size < 2000  # bf16 bits and a header of under 2 kB


def _reheader(data: bytes, **fields: object) -> bytes:
    """``data`` with its JSON header's ``fields`` replaced (and the header length with them)."""
    (length,) = struct.unpack_from("<I", data, len(MAGIC))
    start = len(MAGIC) + 4
    header = json.loads(data[start : start + length]) | fields
    head = json.dumps(header).encode()
    return MAGIC + struct.pack("<I", len(head)) + head + data[start + length :]


@pytest.mark.parametrize(
    ("mangle", "says"),
    [
        (lambda b: b"garbage, not a KV cache", "not a KV transfer"),
        (lambda b: b[:7], "truncated"),
        (lambda b: b[:5] + b"\xff\xff\xff\x7f" + b[9:], "header length"),
        (lambda b: b[:9] + b"{not json" + b[18:], "not JSON"),
        (lambda b: b[:-2], "bytes of KV"),
        (lambda b: b + b"\0\0", "bytes of KV"),
        (lambda b: _reheader(b, dtype="fp16"), "bf16"),
        (lambda b: _reheader(b, batch_size=0), "batch_size"),
        (lambda b: _reheader(b, first_token=-1), "first_token"),
        (lambda b: _reheader(b, first_top=[["7", -0.5]]), "first_top"),
        (lambda b: _reheader(b, first_logprob="high"), "first_logprob"),
        (lambda b: _reheader(b, engine_id=None), "engine_id"),
        (lambda b: _reheader(b, prompt_token_ids=[]), "prompt_token_ids"),
        (lambda b: _reheader(b, shape=[2, 2, 4, 23, 32]), "this model needs"),
        (lambda b: _reheader(b, batch_size=(1 << 20) + 1), "batch_size"),  # past any engine's batch
        (lambda b: _reheader(b, first_top=[[MODEL.vocab, -0.5]]), "first_top"),
        (lambda b: _reheader(b, first_top=[[-1, -0.5]]), "first_top"),
        (lambda b: _reheader(b, first_top=[[True, -0.5]]), "first_top"),
        (lambda b: _reheader(b, first_top=[[i, -1.0] for i in range(21)]), "first_top"),
        (lambda b: _reheader(b, first_top=[[7, "x"]]), "first_top"),
        (lambda b: _reheader(b, first_logprob=1e400), "not JSON"),  # Infinity: JSON has none
        (lambda b: b[:-2] + b"\xc0\x7f", "finite"),  # the last V value a NaN
        (lambda b: b[:-2] + b"\x80\xff", "finite"),  # -infinity
    ],
)
def test_anything_but_a_kv_of_this_model_is_refused_by_name(mangle: Callable[[bytes], bytes], says: str) -> None:
    data = encode(_kv(24, 2), ORIGIN)
    assert decode(_reheader(data), MODEL)[0].prompt_ids == _kv(24, 2).prompt_ids  # the helper alone breaks nothing
    with pytest.raises(KVWireError, match=says):
        decode(mangle(data), MODEL)


@settings(max_examples=40, deadline=None)
@given(
    at=st.integers(0, 2 * 2 * 4 * 24 * 32 - 1),
    bits=st.sampled_from([0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81]),  # +-infinity, NaNs of both signs
)
def test_a_kv_holding_any_non_finite_value_anywhere_is_refused(at: int, bits: int) -> None:
    data = bytearray(encode(_kv(24, 4), ORIGIN))
    offset = len(data) - 2 * (2 * 2 * 4 * 24 * 32) + 2 * at
    data[offset : offset + 2] = bits.to_bytes(2, "little")
    with pytest.raises(KVWireError, match="finite"):
        decode(bytes(data), MODEL)


SECRET = "sk-peer-0123456789"


@pytest.mark.parametrize(
    "field", ["prompt_token_ids", "shape", "dtype", "first_token", "first_top", "first_logprob",
              "batch_size", "seed", "batch_invariant"]
)  # fmt: skip
def test_a_refusal_names_the_field_and_never_repeats_what_the_peer_sent(field: str) -> None:
    data = _reheader(encode(_kv(24, 5), ORIGIN), **{field: SECRET})
    with pytest.raises(KVWireError) as refused:
        decode(data, MODEL)
    assert SECRET not in str(refused.value) and field.split("_")[0] in str(refused.value)
    with pytest.raises(KVWireError) as garbage:
        decode(SECRET.encode() * 3, MODEL)
    assert "sk-peer" not in str(garbage.value)


def test_a_kv_of_another_model_shape_is_refused() -> None:
    data = encode(_kv(24, 3), ORIGIN)
    with pytest.raises(KVWireError, match="this model needs"):
        decode(data, ModelShape(layers=3, heads=4, head_dim=32, vocab=MODEL.vocab, max_len=512))
    with pytest.raises(KVWireError, match="prompt_token_ids"):
        decode(data, ModelShape(layers=2, heads=4, head_dim=32, vocab=10, max_len=512))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_transfer_is_handed_out_once_and_then_freed() -> None:
    store = TransferStore(ttl_s=60, max_bytes=1 << 20)
    store.put("a", b"x" * 100)
    assert store.size_bytes == 100
    assert store.take("a") == b"x" * 100
    assert store.take("a") == "already fetched"
    assert store.take("never") == "no such transfer on this server"
    assert (len(store), store.size_bytes, store.stats.fetched) == (0, 0, 1)


def test_an_unfetched_transfer_expires() -> None:
    clock = Clock()
    store = TransferStore(ttl_s=5, max_bytes=1 << 20, clock=clock)
    store.put("a", b"x" * 10)
    clock.now += 4
    store.put("b", b"y" * 10)
    clock.now += 2  # a is 6 s old, b 2 s
    store.put("c", b"z")
    assert len(store) == 2 and store.size_bytes == 11
    assert str(store.take("a")).startswith("expired: not fetched within 5 s")
    assert store.take("b") == b"y" * 10
    assert store.stats.expired == 1


def test_the_oldest_transfers_go_when_the_bytes_pass_the_bound() -> None:
    store = TransferStore(ttl_s=60, max_bytes=250)
    for name in "abc":
        store.put(name, name.encode() * 100)
    assert store.size_bytes == 200 and len(store) == 2
    assert str(store.take("a")).startswith("evicted")
    assert store.take("c") == b"c" * 100
