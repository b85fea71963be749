"""The prefill server's handed-over KV caches, waiting for their decode servers to fetch them.

Why this module exists: a prefill leg's KV must outlive its request (the decode server asks for it after the
prefill answer went back through the router) but not forever, and not without bound. Each entry is the
encoded transfer (loadgen/engine/kvwire.py) under its transfer id (the prefill answer's
``remote_request_id``); ``take`` hands it out once and frees it; an entry not fetched within ``ttl_s`` is
dropped, and when the entries together pass ``max_bytes`` the oldest go first. Expired entries are swept on
every ``put`` and ``take``, so memory stays bounded without a timer. A dropped id is remembered (bounded)
so that a late fetch is told why it found nothing. Used only on the event loop; no I/O.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

_GONE_MEMORY = 4096


@dataclass
class TransferStats:
    handed_over: int = 0
    fetched: int = 0
    expired: int = 0
    evicted: int = 0


@dataclass
class TransferStore:
    ttl_s: float
    max_bytes: int
    clock: Callable[[], float] = time.monotonic
    stats: TransferStats = field(default_factory=TransferStats)
    _entries: OrderedDict[str, tuple[float, bytes]] = field(default_factory=OrderedDict)
    _gone: OrderedDict[str, str] = field(default_factory=OrderedDict)
    _bytes: int = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def _drop(self, transfer_id: str, why: str) -> None:
        _, data = self._entries.pop(transfer_id)
        self._bytes -= len(data)
        self._gone[transfer_id] = why
        while len(self._gone) > _GONE_MEMORY:
            self._gone.popitem(last=False)

    def _sweep(self) -> None:
        now = self.clock()
        while self._entries:
            transfer_id, (deadline, _) = next(iter(self._entries.items()))
            if deadline > now:
                return
            self._drop(transfer_id, f"expired: not fetched within {self.ttl_s:g} s")
            self.stats.expired += 1

    def put(self, transfer_id: str, data: bytes) -> None:
        self._sweep()
        self._entries[transfer_id] = (self.clock() + self.ttl_s, data)
        self._bytes += len(data)
        self.stats.handed_over += 1
        while self._bytes > self.max_bytes and len(self._entries) > 1:
            oldest = next(iter(self._entries))
            self._drop(oldest, f"evicted: the handed-over KV passed {self.max_bytes} bytes")
            self.stats.evicted += 1

    def take(self, transfer_id: str) -> bytes | str:
        """The transfer's bytes, freed; or why there are none (never handed over, fetched, expired, evicted)."""
        self._sweep()
        entry = self._entries.get(transfer_id)
        if entry is None:
            return self._gone.get(transfer_id, "no such transfer on this server")
        self._drop(transfer_id, "already fetched")
        self.stats.fetched += 1
        return entry[1]
