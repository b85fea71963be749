"""Live per-level figures while a run is going: canaries, errors, unique, diverged, earliest divergence.

Why: a user watching the web UI should see determinism break as it happens, not only in the final
report. Workers send tiny completion summaries (an identity hash and, once the reference is known,
the first-divergence position); the coordinator folds them here. Pure: no Locust, no I/O. The
final report is the authority; this table is the live view of the same definitions.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

Identity = list[int] | list[str] | str


def identity_of(token_ids: list[int] | None, tokens: list[str] | None, text: str | None) -> Identity | None:
    """Token ids, else token strings, else text (DESIGN.md's completion identity)."""
    if token_ids:
        return token_ids
    if tokens:
        return tokens
    return text


def identity_hash(identity: Identity) -> str:
    return hashlib.blake2b(orjson.dumps(identity), digest_size=8).hexdigest()


def first_divergence(seq: Identity, ref: Identity) -> int | None:
    """Smallest i with seq[i] != ref[i]; the shorter length when one is a prefix of the other; None if equal."""
    n = min(len(seq), len(ref))
    for i in range(n):
        if seq[i] != ref[i]:
            return i
    return None if len(seq) == len(ref) else n


@dataclass
class Cell:
    canaries: int = 0
    errors: int = 0
    hashes: set[str] = field(default_factory=set)
    diverged: int = 0
    earliest: int | None = None


class LiveTable:
    """Folds canary completion summaries into per-(canary, level) cells; picks the baseline reference."""

    def __init__(self) -> None:
        self.cells: dict[tuple[str, str], Cell] = {}  # (canary, "baseline" or level) -> cell
        self._baseline: dict[str, Counter[str]] = {}
        self._baseline_first: dict[str, dict[str, tuple[int, Identity]]] = {}  # canary -> hash -> (order, identity)
        self.references: dict[str, Identity] = {}

    def add(self, msg: dict[str, Any]) -> None:
        phase = msg["phase"]
        if phase == "warmup":
            return  # counted in no figure
        canary = str(msg["canary"])
        key = (canary, "baseline" if phase == "baseline" else str(msg["level"]))
        cell = self.cells.setdefault(key, Cell())
        cell.canaries += 1
        if msg["status"] != "ok" or msg.get("hash") is None:
            cell.errors += 1
            return
        cell.hashes.add(msg["hash"])
        if phase == "baseline" and msg.get("identity") is not None:
            self._baseline.setdefault(canary, Counter())[msg["hash"]] += 1
            seen = self._baseline_first.setdefault(canary, {})
            seen.setdefault(msg["hash"], (len(seen), msg["identity"]))
        first = msg.get("first_div")  # computed by the sender once it has the reference; None: identical
        if phase == "sweep" and first is not None:
            cell.diverged += 1
            cell.earliest = first if cell.earliest is None else min(cell.earliest, first)

    def choose_references(self) -> dict[str, Identity]:
        """The modal baseline completion per canary (earliest first on a tie), once the baseline is in."""
        for canary, counts in self._baseline.items():
            if canary in self.references:
                continue
            first_seen = self._baseline_first[canary]
            best = max(counts, key=lambda h: (counts[h], -first_seen[h][0]))
            self.references[canary] = first_seen[best][1]
        return self.references

    def rows(self) -> list[dict[str, Any]]:
        def order(key: tuple[str, str]) -> tuple[str, int]:
            return key[0], -1 if key[1] == "baseline" else int(key[1])

        return [
            {"canary": c, "level": lvl, "canaries": cell.canaries, "errors": cell.errors, "unique": len(cell.hashes),
             "diverged": cell.diverged if lvl != "baseline" and c in self.references else "—",
             "earliest": "—" if cell.earliest is None else cell.earliest}
            for (c, lvl), cell in sorted(self.cells.items(), key=lambda kv: order(kv[0]))
        ]  # fmt: skip
