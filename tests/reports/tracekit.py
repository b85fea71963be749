"""Test helpers: engine step traces written as an engine writes them (``loadgen.core.steptrace.StepWriter``)."""

from __future__ import annotations

import uuid
from pathlib import Path

from loadgen.core.steptrace import Source, StepRecord, StepWriter


def ids_of(n: int) -> list[str]:
    return [uuid.UUID(int=i + 1).hex for i in range(n)]


class Engine:
    """A scripted engine: each step lists (record key or None for background, computed, scheduled, prompt)."""

    def __init__(self, path: Path, source: Source = "embedded") -> None:
        self.writer = StepWriter(path)
        self.source: Source = source
        self.n = 0

    def step(self, rows: list[tuple[str, int, int, int]], preempted: tuple[str, ...] = ()) -> None:
        self.writer.write(
            StepRecord(
                step=self.n,
                t=1000.0 + self.n,
                ids=[f"cmpl-{k}-0-abcd1234" for k, _, _, _ in rows],
                computed=[c for _, c, _, _ in rows],
                scheduled=[s for _, _, s, _ in rows],
                prompt=[p for _, _, _, p in rows],
                source=self.source,
                preempted=[f"cmpl-{k}" for k in preempted],
            )
        )
        self.n += 1
