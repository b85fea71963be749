"""KV storage: one fixed slot per running sequence, and a prefix cache of full 16-token blocks.

Why this module exists: memory must be bounded by ``--max-num-seqs`` x context length (slots
are preallocated once), and prefix caching must behave like vLLM's automatic prefix caching:
blocks of 16 prompt tokens keyed by a hash chain over all tokens before them (and the request's
``cache_salt``), reused only as a whole prefix, never covering the last prompt token, evicted
least recently used. A hit copies the cached K/V into the slot; the engine then prefills only
the suffix. For the prefill and decode roles a slot's K/V is copied out whole (``export``) and
into another server's slot (``load``). It must not compute anything: the model writes K/V, this
module stores them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

import numpy as np

from loadgen.engine.kernels import F32, F64
from loadgen.engine.weights import ModelConfig

BLOCK_TOKENS: Final = 16
Held = TypeVar("Held")  # what an LRU of blocks keeps per block (the prefix cache: K/V; the offload tier: encoded)


class SlotKV:
    """K and V for every slot: arrays (layers, slots, heads, max_len, head_dim).

    Stored as float64 holding bf16 values, so attention reads them without a conversion. Slots
    in use are always 0..used-1 (the scheduler compacts on release), so a decode batch reads a
    view of the first slots instead of gathering copies.
    """

    def __init__(self, cfg: ModelConfig, slots: int) -> None:
        shape = (cfg.n_layers, slots, cfg.n_heads, cfg.max_model_len, cfg.head_dim)
        self.k: F64 = np.zeros(shape, dtype=np.float64)
        self.v: F64 = np.zeros(shape, dtype=np.float64)
        self.slots = slots
        self.used = 0

    @property
    def free_slots(self) -> int:
        return self.slots - self.used

    def acquire(self) -> int:
        if self.used >= self.slots:
            raise RuntimeError("SlotKV.acquire: no free slot (the scheduler checks free_slots first)")
        self.used += 1
        return self.used - 1

    def export(self, slot: int, length: int) -> tuple[F32, F32]:
        """Copies of the slot's first ``length`` positions: K and V (layers, heads, length, head_dim), float32
        (exact: the values are bf16). What a prefill server hands over."""
        return (
            self.k[:, slot, :, :length].astype(np.float32),
            self.v[:, slot, :, :length].astype(np.float32),
        )

    def load(self, slot: int, start: int, k: F32, v: F32) -> None:
        """Write handed-over K/V (layers, heads, n, head_dim) into positions ``start..n-1`` of ``slot``."""
        self.k[:, slot, :, start : k.shape[2]] = k[:, :, start:]
        self.v[:, slot, :, start : v.shape[2]] = v[:, :, start:]

    def release_moving_last(self, slot: int, last_len: int) -> int | None:
        """Free ``slot``; the last used slot's first ``last_len`` positions move into it.

        Returns the slot that moved (whose owner must now use ``slot``), or None if ``slot``
        was the last one.
        """
        last = self.used - 1
        self.used -= 1
        if slot == last:
            return None
        self.k[:, slot, :, :last_len] = self.k[:, last, :, :last_len]
        self.v[:, slot, :, :last_len] = self.v[:, last, :, :last_len]
        return last


def block_hashes(token_ids: list[int], salt: str | None) -> list[int]:
    """Hash chain of the full blocks of ``token_ids``; block i's hash covers tokens [0, 16(i+1))."""
    hashes: list[int] = []
    parent = hash(("loadgen-prefix", salt))
    for start in range(0, len(token_ids) - BLOCK_TOKENS + 1, BLOCK_TOKENS):
        parent = hash((parent, tuple(token_ids[start : start + BLOCK_TOKENS])))
        hashes.append(parent)
    return hashes


def read_block(kv: SlotKV, slot: int, i: int) -> tuple[F32, F32]:
    """Block ``i`` of ``slot``'s K and V (layers, heads, 16, head_dim), float32 (exact: the values are bf16)."""
    lo = i * BLOCK_TOKENS
    return (
        kv.k[:, slot, :, lo : lo + BLOCK_TOKENS, :].astype(np.float32),
        kv.v[:, slot, :, lo : lo + BLOCK_TOKENS, :].astype(np.float32),
    )


def write_block(kv: SlotKV, slot: int, i: int, k: F32, v: F32) -> None:
    """K and V into block ``i`` of ``slot`` (float32 -> float64, exact)."""
    lo = i * BLOCK_TOKENS
    kv.k[:, slot, :, lo : lo + BLOCK_TOKENS, :] = k
    kv.v[:, slot, :, lo : lo + BLOCK_TOKENS, :] = v


def held_run(blocks: OrderedDict[int, Held], hashes: list[int], start: int, usable: int) -> int:
    """How many blocks from ``start`` on, up to ``usable``, ``blocks`` holds in a row; each made most recent."""
    n = start
    while n < usable and hashes[n] in blocks:
        blocks.move_to_end(hashes[n])
        n += 1
    return n - start


def store_blocks(
    blocks: OrderedDict[int, Held], hashes: list[int], capacity: int, make: Callable[[int], Held]
) -> tuple[int, int]:
    """Every block ``blocks`` lacks gets ``make(i)``, the ones it holds become most recent, and the least recently
    used go past ``capacity``: the blocks stored and evicted."""
    stored = evicted = 0
    for i, h in enumerate(hashes):
        if h in blocks:
            blocks.move_to_end(h)
            continue
        blocks[h] = make(i)
        stored += 1
        while len(blocks) > capacity:
            blocks.popitem(last=False)
            evicted += 1
    return stored, evicted


@dataclass
class CacheStats:
    queries_tokens: int = 0
    hits_tokens: int = 0


class PrefixCache:
    """LRU map from block hash to that block's K/V (layers, heads, 16, head_dim) each."""

    def __init__(self, capacity_blocks: int, enabled: bool) -> None:
        self.capacity_blocks = capacity_blocks
        self.enabled = enabled
        self._blocks: OrderedDict[int, tuple[F32, F32]] = OrderedDict()
        self.stats = CacheStats()

    def __len__(self) -> int:
        return len(self._blocks)

    def reset(self) -> None:
        self._blocks.clear()

    def match(self, hashes: list[int], prompt_len: int) -> int:
        """Number of leading blocks available, never covering the last prompt token."""
        if not self.enabled:
            return 0
        n = held_run(self._blocks, hashes, 0, min(len(hashes), (prompt_len - 1) // BLOCK_TOKENS))
        self.stats.queries_tokens += prompt_len
        self.stats.hits_tokens += n * BLOCK_TOKENS
        return n

    def load(self, hashes: list[int], n_blocks: int, kv: SlotKV, slot: int) -> None:
        """Copy the first ``n_blocks`` cached blocks into ``slot``."""
        for i in range(n_blocks):
            write_block(kv, slot, i, *self._blocks[hashes[i]])

    def store(self, hashes: list[int], kv: SlotKV, slot: int) -> None:
        """Cache every full block of the slot's prompt that is not cached yet; evict LRU."""
        if not self.enabled or self.capacity_blocks <= 0:
            return
        store_blocks(self._blocks, hashes, self.capacity_blocks, lambda i: read_block(kv, slot, i))
