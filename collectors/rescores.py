"""The re-score writer: one ``RescoreRecord`` per line of ``rescores[-<worker>].jsonl`` (or the owner's
``rescores-alone.jsonl``), handed to the OS as each re-score completes.

Why apart from the canary collector: only canaries that ask for a re-score (``rescore = true``) write here, so
the file is opened at the first record, and a run without one leaves none. Counts its own write failures as
``JsonlWriter`` does; never raises for a full disk.
"""

from __future__ import annotations

from pathlib import Path

from collectors.jsonl import JsonlWriter
from loadgen.core.rescore_record import RescoreRecord


class RescoreCollector:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.writer: JsonlWriter | None = None
        self.open_failures = 0

    def write(self, record: RescoreRecord) -> bool:
        if self.writer is None:
            try:
                self.writer = JsonlWriter(self.path)
            except OSError:
                self.open_failures += 1
                return False
        return self.writer.write(record)

    @property
    def failures(self) -> int:
        return self.open_failures + (self.writer.failures if self.writer is not None else 0)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
