"""Follow a run folder's canary records while the run writes them, and feed them to the progress model.

Why: ``loadgen run`` shows progress from the CLI process while Locust runs in a child process; the
records it writes anyway (``canaries.jsonl``, or ``canaries-<worker>.jsonl`` per worker) are the
whole channel. ``CanaryTail`` reads only what was appended since its last call and only complete
lines (a record still being written waits for the next call); a line that does not parse, or is
not a canary record this version reads, is counted and skipped, as the run-folder reader does
(docs/design.md, "The canary record"). ``Follower`` polls in a daemon thread. Reading only: this
module never writes into the run folder and never decides a figure the report owns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import orjson

from loadgen.cli.progress.model import RunProgress, Snapshot
from loadgen.core.errors import RunFolderError
from loadgen.core.record import CanaryRecord

POLL_S = 0.25  # how often the folder is read: progress needs no more, and each read is one small system call per file


class CanaryTail:
    """New complete canary records appended to a run folder's ``canaries*.jsonl`` since the last ``read``."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.offsets: dict[Path, int] = {}
        self.skipped = 0  # lines that were not a canary record

    def read(self) -> list[CanaryRecord]:
        out: list[CanaryRecord] = []
        for path in sorted(self.run_dir.glob("canaries*.jsonl")):
            start = self.offsets.get(path, 0)
            try:
                with open(path, "rb") as fh:
                    fh.seek(start)
                    data = fh.read()
            except OSError:
                continue  # gone or unreadable for now: the report will say so, progress just waits
            end = data.rfind(b"\n")
            if end < 0:
                continue
            self.offsets[path] = start + end + 1
            for line in data[:end].split(b"\n"):
                if line.strip():
                    record = self._parse(line, path)
                    if record is not None:
                        out.append(record)
        return out

    def _parse(self, line: bytes, path: Path) -> CanaryRecord | None:
        try:
            raw = orjson.loads(line)
            if isinstance(raw, dict):
                return CanaryRecord.from_dict(raw, where=path.name)
        except (orjson.JSONDecodeError, RunFolderError, TypeError, ValueError):
            pass
        self.skipped += 1
        return None


class Follower:
    """Reads a run folder every ``poll_s`` in a daemon thread and hands each new snapshot to ``on_update``;
    ``stop`` reads once more (so the last records count) and waits for the thread."""

    def __init__(
        self, run_dir: Path, model: RunProgress, on_update: Callable[[Snapshot], None], *, poll_s: float = POLL_S
    ) -> None:
        self.tail = CanaryTail(run_dir)
        self.model = model
        self.on_update = on_update
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="loadgen-progress", daemon=True)

    def start(self) -> Follower:
        self.on_update(self.model.snapshot())
        self._thread.start()
        return self

    def poll(self) -> Snapshot:
        self.model.add(self.tail.read())
        return self.model.snapshot()

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self.poll_s):
                self.on_update(self.poll())
        except Exception:  # noqa: BLE001 - showing progress must never end a run: stop following instead
            return

    def stop(self) -> Snapshot:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        snap = self.poll()
        self.on_update(snap)
        return snap
