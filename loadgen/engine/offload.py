"""The offload tier: prompt blocks kept outside the prefix cache, at a stored dtype, and loaded back into a slot.

Why this module exists: vLLM's ``--kv-offloading-size`` keeps every computed prompt block in CPU memory and, on a
later request, loads the blocks the GPU prefix cache lacks (an "external" hit); its answers may then differ from a
GPU-prefix hit or a recompute, and the load tool must see that path run (docs/design.md, "The engine step trace";
docs/engine.md, "The offload tier"). This tier is an LRU map from a block's hash (loadgen/engine/kvcache.py's
chain) to its K/V, bounded by ``size_gib`` over the bytes one block takes at the stored dtype:

- ``bf16``: the slot's bf16 values, bit for bit (as vLLM's native tier copies them): a reload is exact;
- ``fp8``: scaled float8 e4m3 (one float32 scale per block, layer and head, absmax / 448; three mantissa bits,
  subnormals below 2^-6 on a 2^-9 grid), reassembled into bf16 on load: the reload changes numerics.

Byte counters are the bytes at the stored dtype (what ``vllm:kv_offload_store_bytes_total`` and
``..._load_bytes_total`` count). It never computes attention and never decides what to look up: the scheduler
calls ``match``, ``load`` and ``store``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from loadgen.engine.kernels import F32, to_bf16
from loadgen.engine.kvcache import BLOCK_TOKENS, SlotKV, held_run, read_block, store_blocks, write_block

OffloadDtype = Literal["bf16", "fp8"]
DTYPES: Final[tuple[OffloadDtype, ...]] = ("bf16", "fp8")
E4M3_MAX: Final = 448.0
_E4M3_MIN_NORMAL_EXP: Final = -6  # below 2^-6 e4m3 is subnormal: a fixed grid of 2^-9
_MANTISSA_BITS: Final = 3
U8 = npt.NDArray[np.uint8]
U16 = npt.NDArray[np.uint16]


def _floor_log2(a: F32) -> npt.NDArray[np.int32]:
    """floor(log2 a) exactly (frexp: a = m 2^e with m in [0.5, 1)); 0 for 0."""
    return (np.frexp(a)[1] - 1).astype(np.int32)


def e4m3_round(x: F32) -> F32:
    """``x`` (already scaled into [-448, 448]) rounded to the nearest float8 e4m3 value, ties to even; float32."""
    a = np.abs(x).astype(np.float32)
    exp = np.maximum(_floor_log2(a), _E4M3_MIN_NORMAL_EXP)
    quantum = np.ldexp(np.float32(1.0), exp - _MANTISSA_BITS).astype(np.float32)
    rounded = np.minimum(np.round(a / quantum) * quantum, E4M3_MAX)  # np.round: ties to even
    out: F32 = np.copysign(rounded, x).astype(np.float32)
    return out


def _e4m3_table() -> F32:
    """Every e4m3 code's value (0x7F and 0xFF, e4m3fn's NaNs, read as 448 and never written)."""
    codes = np.arange(256, dtype=np.uint32)
    exp_bits, mant = (codes >> 3) & 0xF, codes & 0x7
    normal = np.exp2(exp_bits.astype(np.float32) - 7) * (1 + mant / 8.0)
    sub = mant * 2.0**-9
    value = np.where(exp_bits == 0, sub, np.minimum(normal, E4M3_MAX)).astype(np.float32)
    return np.where(codes >> 7 == 1, -value, value).astype(np.float32)


_TABLE: Final = _e4m3_table()


def e4m3_encode(rounded: F32) -> U8:
    """The codes of values already on the e4m3 grid (``e4m3_round``'s output)."""
    a = np.abs(rounded).astype(np.float32)
    normal = a >= 2.0**_E4M3_MIN_NORMAL_EXP
    exp = np.where(normal, _floor_log2(a), 0)
    mant_normal = np.rint(np.ldexp(a, _MANTISSA_BITS - exp) - 8).astype(np.int32)
    mant_sub = np.rint(a / 2.0**-9).astype(np.int32)
    code = np.where(normal, ((exp + 7) << 3) | mant_normal, mant_sub)
    out: U8 = (code | (np.signbit(rounded).astype(np.int32) << 7)).astype(np.uint8)
    return out


def e4m3_decode(codes: U8) -> F32:
    return _TABLE[codes]


@dataclass(frozen=True)
class Fp8Block:
    codes: U8  # (layers, heads, 16, head_dim)
    scale: F32  # (layers, heads, 1, 1)


def to_fp8(x: F32) -> Fp8Block:
    """One block's K or V as scaled e4m3: a scale per layer and head, absmax / 448 (1 where all are 0)."""
    absmax = np.max(np.abs(x), axis=(2, 3), keepdims=True).astype(np.float32)
    scale = np.where(absmax > 0, absmax / np.float32(E4M3_MAX), np.float32(1.0)).astype(np.float32)
    return Fp8Block(e4m3_encode(e4m3_round((x / scale).astype(np.float32))), scale)


def from_fp8(block: Fp8Block) -> F32:
    """The block reassembled at the slot's dtype (bf16 values in float32)."""
    return to_bf16((e4m3_decode(block.codes) * block.scale).astype(np.float32))


def to_bf16_bits(x: F32) -> U16:
    """bf16 values (in float32) as their 16 stored bits: exact."""
    return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def from_bf16_bits(bits: U16) -> F32:
    return (bits.astype(np.uint32) << 16).view(np.float32)


Stored = tuple[U16, U16] | tuple[Fp8Block, Fp8Block]


def bytes_per_block(layers: int, heads: int, head_dim: int, dtype: OffloadDtype) -> int:
    """K and V of one 16-token block at the stored dtype (fp8 with its float32 scales)."""
    elements = 2 * layers * heads * BLOCK_TOKENS * head_dim
    return 2 * elements if dtype == "bf16" else elements + 2 * layers * heads * 4


@dataclass
class OffloadStats:
    store_bytes: int = 0
    load_bytes: int = 0
    stored_blocks: int = 0
    loaded_blocks: int = 0
    evicted_blocks: int = 0


class OffloadTier:
    """LRU of block hash -> stored K/V; capacity ``size_gib`` GiB over ``block_bytes``."""

    def __init__(self, size_gib: float, dtype: OffloadDtype, layers: int, heads: int, head_dim: int) -> None:
        self.size_gib = size_gib
        self.dtype: OffloadDtype = dtype
        self.block_bytes = bytes_per_block(layers, heads, head_dim, dtype)
        self.capacity_blocks = int(size_gib * (1 << 30)) // self.block_bytes
        self._blocks: OrderedDict[int, Stored] = OrderedDict()
        self.stats = OffloadStats()

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._blocks

    def reset(self) -> None:
        self._blocks.clear()

    def match(self, hashes: list[int], start: int, usable: int) -> int:
        """How many blocks from ``start`` on (``start`` blocks found elsewhere) this tier holds, up to ``usable``."""
        return held_run(self._blocks, hashes, start, usable)

    def encode(self, k: F32, v: F32) -> Stored:
        if self.dtype == "bf16":
            return to_bf16_bits(k), to_bf16_bits(v)
        return to_fp8(k), to_fp8(v)

    def decode(self, stored: Stored) -> tuple[F32, F32]:
        k, v = stored
        if isinstance(k, Fp8Block) and isinstance(v, Fp8Block):
            return from_fp8(k), from_fp8(v)
        assert not isinstance(k, Fp8Block) and not isinstance(v, Fp8Block)
        return from_bf16_bits(k), from_bf16_bits(v)

    def load(self, hashes: list[int], start: int, n_blocks: int, kv: SlotKV, slot: int) -> None:
        """Blocks ``start..start+n_blocks-1`` into ``slot``, reassembled at the slot's dtype."""
        for i in range(start, start + n_blocks):
            write_block(kv, slot, i, *self.decode(self._blocks[hashes[i]]))
        self.stats.loaded_blocks += n_blocks
        self.stats.load_bytes += n_blocks * self.block_bytes

    def store(self, hashes: list[int], kv: SlotKV, slot: int) -> None:
        """Every full block of the slot's prompt not stored yet; the least recently used go first."""
        if self.capacity_blocks <= 0:
            return
        stored, evicted = store_blocks(
            self._blocks, hashes, self.capacity_blocks, lambda i: self.encode(*read_block(kv, slot, i))
        )
        self.stats.stored_blocks += stored
        self.stats.store_bytes += stored * self.block_bytes
        self.stats.evicted_blocks += evicted
