"""A prompt's KV cache as a prefill server hands it to a decode server: the arrays and their binary form.

Why this module exists: in the prefill and decode roles (docs/engine.md, "Prefill and decode roles") the
decode server must decode from the very values another process's prefill produced, so they travel whole,
bit for bit: K and V of every layer, head and prompt position, with the first token the prefill step
sampled (its id, logprob and top alternatives) and the size of the batch that step ran. The engine stores
K/V as bf16 values, so the wire carries their 16 high bits: exact, and half the bytes of float32.

The form (``encode``/``decode``): ``LGKV`` and a version byte, a little-endian u32 header length, a JSON
header (prompt token ids, shape ``[2, layers, heads, tokens, head_dim]``, dtype ``bf16``, the first token,
the batch size, and the prefiller's engine id, weight seed and kernel setting), then ``2 * prod(shape)``
bytes of little-endian bf16 bit patterns, K before V. ``decode`` checks every part against the decoder's
model shape and raises :class:`KVWireError` on anything else: a garbled answer is an error, never an array.
What it accepts is what a prefill of this model can have made: finite K/V values (a NaN or infinity loaded
into a slot would spread to every later request that reads the slot, and kill a sampled one), token ids
below the vocabulary, finite logprobs, at most ``MAX_LOGPROBS`` alternatives, a batch of 1 to
``MAX_BATCH_SIZE`` sequences. Its messages name the part and what was expected, never a value the bytes
hold (the bytes come from another server: the decode server's error answer must not relay them).
Pure: arrays and bytes in, arrays and bytes out.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import orjson

from loadgen.engine.kernels import F32
from loadgen.engine.protocol import MAX_LOGPROBS

MAGIC: Final = b"LGKV\x01"
MAX_HEADER_BYTES: Final = 1 << 20
# Above any engine's batch (vLLM's --max-num-seqs defaults to 256 or 1024); the load tool's reader of
# ``x_batch_sizes`` (loadgen/core/wire/response.py) draws the same line.
MAX_BATCH_SIZE: Final = 1 << 20
_LEN: Final = struct.Struct("<I")


class KVWireError(ValueError):
    """The bytes are not a KV cache this decoder can load (the message says which part is wrong)."""


@dataclass(frozen=True)
class HandedKV:
    """One prompt's KV from its prefill step, and what that step sampled.

    ``k``/``v``: (layers, heads, tokens, head_dim) float32 holding bf16 values; ``tokens`` is the prompt length.
    """

    prompt_ids: tuple[int, ...]
    k: F32
    v: F32
    first_token: int
    first_logprob: float | None
    first_top: tuple[tuple[int, float], ...]
    batch_size: int


@dataclass(frozen=True)
class Origin:
    """Who made the KV: the prefill server's engine id, weight seed and whether its kernels were batch-invariant."""

    engine_id: str
    seed: int
    batch_invariant: bool


@dataclass(frozen=True)
class ModelShape:
    """What the decoder's own cache looks like; a handed-over cache must match it."""

    layers: int
    heads: int
    head_dim: int
    vocab: int
    max_len: int


def _bf16_bits(x: F32) -> bytes:
    bits = (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) >> np.uint32(16)).astype("<u2")
    return bits.tobytes()


def encode(kv: HandedKV, origin: Origin) -> bytes:
    header = {
        "prompt_token_ids": list(kv.prompt_ids),
        "shape": [2, *kv.k.shape],
        "dtype": "bf16",
        "first_token": kv.first_token,
        "first_logprob": kv.first_logprob,
        "first_top": [list(pair) for pair in kv.first_top],
        "batch_size": kv.batch_size,
        "engine_id": origin.engine_id,
        "seed": origin.seed,
        "batch_invariant": origin.batch_invariant,
    }
    head = orjson.dumps(header)
    return MAGIC + _LEN.pack(len(head)) + head + _bf16_bits(kv.k) + _bf16_bits(kv.v)


def _int(header: dict[str, Any], key: str, lo: int, hi: int) -> int:
    value = header.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value < hi:
        raise KVWireError(f"header field {key!r} must be an integer in [{lo}, {hi})")
    return value


def _token(value: object, vocab: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < vocab


def _logprob(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _header(data: bytes) -> tuple[dict[str, Any], int]:
    if not data.startswith(MAGIC):
        raise KVWireError(f"not a KV transfer (it does not start with {MAGIC!r})")
    start = len(MAGIC) + _LEN.size
    if len(data) < start:
        raise KVWireError("truncated before the header length")
    (length,) = _LEN.unpack_from(data, len(MAGIC))
    if length > MAX_HEADER_BYTES or start + length > len(data):
        raise KVWireError(f"the header length does not fit the {len(data)} bytes received")
    try:
        header = orjson.loads(data[start : start + length])
    except orjson.JSONDecodeError:
        raise KVWireError("the header is not JSON") from None
    if not isinstance(header, dict):
        raise KVWireError("the header is not a JSON object")
    return header, start + length


def decode(data: bytes, model: ModelShape) -> tuple[HandedKV, Origin]:
    """The KV and its origin from ``encode``'s bytes, checked against the decoder's ``model``."""
    header, body = _header(data)
    ids = header.get("prompt_token_ids")
    if not isinstance(ids, list) or not ids or len(ids) >= model.max_len:
        raise KVWireError(f"prompt_token_ids must be a list of 1 to {model.max_len - 1} token ids")
    if not all(_token(t, model.vocab) for t in ids):
        raise KVWireError(f"prompt_token_ids must be token ids in [0, {model.vocab})")
    shape = [2, model.layers, model.heads, len(ids), model.head_dim]
    if header.get("shape") != shape or header.get("dtype") != "bf16":
        raise KVWireError(f"shape or dtype is not what this model needs for this prompt: {shape} bf16")
    count = int(np.prod(shape))
    if len(data) - body != 2 * count:
        raise KVWireError(f"{len(data) - body} bytes of KV; shape {shape} needs {2 * count}")
    top = header.get("first_top")
    if (
        not isinstance(top, list)
        or len(top) > MAX_LOGPROBS
        or not all(isinstance(p, list) and len(p) == 2 and _token(p[0], model.vocab) and _logprob(p[1]) for p in top)
    ):
        raise KVWireError(
            f"first_top must be at most {MAX_LOGPROBS} [token id in [0, {model.vocab}), finite logprob] pairs"
        )
    logprob = header.get("first_logprob")
    if logprob is not None and not _logprob(logprob):
        raise KVWireError("first_logprob must be a finite number or null")
    engine_id, invariant = header.get("engine_id"), header.get("batch_invariant")
    if not isinstance(engine_id, str) or not isinstance(invariant, bool):
        raise KVWireError("engine_id must be a string and batch_invariant a boolean")
    bits = np.frombuffer(data, dtype="<u2", count=count, offset=body).astype(np.uint32) << np.uint32(16)
    kv = bits.view(np.float32).reshape(shape)
    if not np.isfinite(kv).all():
        raise KVWireError("K and V must be finite numbers (it holds a NaN or an infinity)")
    handed = HandedKV(
        prompt_ids=tuple(ids),
        k=kv[0],
        v=kv[1],
        first_token=_int(header, "first_token", 0, model.vocab),
        first_logprob=None if logprob is None else float(logprob),
        first_top=tuple((int(t), float(lp)) for t, lp in top),
        batch_size=_int(header, "batch_size", 1, MAX_BATCH_SIZE + 1),
    )
    return handed, Origin(engine_id, _int(header, "seed", -(1 << 63), 1 << 63), invariant)
