"""``loadgen run --ui`` on the terminal: each run started from the web UI, as a headless run shows it.

Why: the web UI runs in Locust's process, which prepares, runs and reports every start itself
(``loadgen.load.coordinator``), so the terminal that started it would otherwise hear nothing of a
run (and, on Ctrl-C, get Locust's traceback and empty stats tables). Locust's output goes to a log
file instead (``LOG_NAME`` in the folder that receives the run folders), and this module reads that
log as it grows: the coordinator's line as a run starts (``RUN_STARTED``: the CLI then follows the
run folder's records, as for a headless run) and once it is over, reports written (``RUN_ENDED``),
and every warning or error the UI logged (a refused start, a failed report). Each becomes a progress
event (``loadgen.studies.events``); the CLI renders them. Reading only: nothing here writes.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from loadgen.core.errors import LoadgenError
from loadgen.core.manifest import RunStatus, read_manifest
from loadgen.core.scenario import parse_scenario
from loadgen.load.options import RUN_ENDED, RUN_STARTED  # not coordinator: that imports Locust (gevent)
from loadgen.studies.events import LoadEnded, LoadStarted, Progress, RunEnded, UiNotice

LOG_NAME = "locust-ui.log"  # Locust's output during a web UI session, appended to, in the out folder
POLL_S = 0.25
# Locust's log format: "[2025-01-02 03:04:05,678] host/LEVEL/logger: message"
_LINE = re.compile(r"^\[[^\]]*\] [^/]*/(?P<level>[A-Z]+)/(?P<name>[^:]+): (?P<msg>.*)$")
_SHOWN = frozenset({"WARNING", "ERROR", "CRITICAL"})
_PREFIX = "web UI: "


@dataclass
class UiSession:
    """Reads ``log`` from ``offset`` on (what this session appended) and turns its lines into events."""

    log: Path
    offset: int
    progress: Progress
    runs: list[Path] = field(default_factory=list)  # every run started, in order
    current: Path | None = None  # the run going now
    last_status: RunStatus | None = None  # the last run's status once it ended (None: unreadable, or no run ended)
    _rest: bytes = b""

    def poll(self) -> None:
        try:
            with open(self.log, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return
        self.offset += len(data)
        lines = (self._rest + data).split(b"\n")
        self._rest = lines.pop()  # a line still being written waits for the next poll
        for raw in lines:
            self._line(raw.decode("utf-8", "replace").rstrip("\r"))

    def _line(self, line: str) -> None:
        m = _LINE.match(line)
        if m is None:
            return
        level, name, msg = m["level"], m["name"], m["msg"]
        if name == "loadgen" and msg.startswith(RUN_STARTED):
            self._start(Path(msg[len(RUN_STARTED) :]))
        elif name == "loadgen" and msg.startswith(RUN_ENDED):
            self._end(Path(msg[len(RUN_ENDED) :]))
        elif level in _SHOWN and (name.startswith("loadgen") or level != "WARNING"):
            # the guard's own lines already say where they come from (``loadgen.load.webui``): said once
            self.progress(UiNotice(msg if msg.startswith(_PREFIX) else _PREFIX + msg))

    def _start(self, run_dir: Path) -> None:
        if self.current is not None:
            self._end(self.current)
        try:
            resolved = cast(dict[str, Any], read_manifest(run_dir).scenario)
            scenario = parse_scenario(resolved, f"{run_dir}/manifest.json")
        except LoadgenError as exc:
            self.progress(UiNotice(f"{_PREFIX}run folder {run_dir}: not followed ({exc})"))
            return
        self.current = run_dir
        self.runs.append(run_dir)
        self.progress(LoadStarted(run_dir, scenario))

    def _end(self, run_dir: Path) -> None:
        if run_dir != self.current:
            return
        self.current = None
        self.progress(LoadEnded(run_dir, reporting=False))
        try:
            status = read_manifest(run_dir).run_status
        except LoadgenError:
            status = None
        self.last_status = status
        self.progress(RunEnded(run_dir, status))

    def close(self) -> None:
        """Locust has exited: its last lines, and a run it left open (it died) ended as its manifest says."""
        self.poll()
        if self._rest:
            self._line(self._rest.decode("utf-8", "replace"))
            self._rest = b""
        if self.current is not None:
            self._end(self.current)


class Watcher:
    """``UiSession.poll`` every ``poll_s`` in a daemon thread, while the main thread waits for Locust."""

    def __init__(self, session: UiSession, poll_s: float = POLL_S) -> None:
        self.session = session
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="loadgen-ui", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self.poll_s):
                self.session.poll()
        except Exception:  # noqa: BLE001 - following the UI must never end the session: stop following
            return

    def stop(self) -> list[Path]:
        self._stop.set()
        self._thread.join()
        self.session.close()
        return self.session.runs
