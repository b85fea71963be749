"""Canary and background collectors: they append each finished request to the run folder.

Why: every canary completion must reach disk the moment it completes (a killed process loses
nothing it finished), and background traffic must be timed; its rows are gathered for
``BACKGROUND_FLUSH_S`` and handed to the OS together (not one system call per row at thousands of
rows a second; a killed process loses what was gathered). The canary collector also appends each record
it wrote whole to the columns file the report reads (``collectors.sidecar``). The canary collector follows Locust's
``register()`` / ``close()`` listener pattern but imports nothing from Locust: ``register`` takes
the event hook, so tests fire synthetic events with no HTTP. Both count their own write failures,
because Locust's ``EventHook.fire`` logs and swallows listener exceptions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from collectors.jsonl import JsonlWriter
from collectors.sidecar import SidecarWriter
from loadgen.core.background_row import BackgroundRow
from loadgen.core.record import CanaryRecord

BACKGROUND_FLUSH_S = 0.5


class Hook(Protocol):
    def add_listener(self, handler: Any) -> Any: ...
    def remove_listener(self, handler: Any) -> None: ...


class CanaryCollector:
    """Writes one CanaryRecord per line (the live table and the report read the file)."""

    def __init__(self, path: Path) -> None:
        self.writer = JsonlWriter(path)
        self.columns = SidecarWriter(path)  # the report's columns, beside the JSONL (collectors.sidecar)
        self._hook: Hook | None = None

    def register(self, hook: Hook) -> None:
        hook.add_listener(self.on_record)
        self._hook = hook

    def on_record(self, record: CanaryRecord, **_: Any) -> None:
        line = self.writer.encode(record)  # orjson writes the dataclass itself: same bytes as to_dict(), ~50x cheaper
        if line is not None and self.writer.write_line(line):
            self.columns.append(record, line)
        else:  # the JSONL lacks this record: the columns file covers no line after it
            self.columns.stop()

    def close(self) -> None:
        if self._hook is not None:
            self._hook.remove_listener(self.on_record)
            self._hook = None
        self.writer.close()
        self.columns.close()


class BackgroundCollector:
    """Writes one compact line per background request: level, timing, status, token counts.

    Called by the background user directly, not through an event hook, and keeps no counts of its
    own (the report reads the file): at thousands of requests a second every step is CPU the load
    generator needs."""

    def __init__(self, path: Path) -> None:
        self.writer = JsonlWriter(path, flush_s=BACKGROUND_FLUSH_S)

    def on_request(self, row: BackgroundRow) -> None:
        self.writer.write(row)  # orjson writes the dataclass itself, its fields in order

    def close(self) -> None:
        self.writer.close()
