"""The CLI's progress callback: turns the studies' events into what a display shows, and follows a run.

Why: ``loadgen run``, ``coldboot`` and ``matrix`` hand one callback to the study they call
(``loadgen.studies.events``); this is it. It says what is being done (starting an engine, probing,
writing the reports), keeps lines that matter (an engine's start time, the run folder, each cell's
end), and while a run's load goes it follows the run folder (``follow.Follower``) so the display
shows canaries done of the quota, unique and diverged so far, errors and the time left. Showing
progress must never end a study: an error while showing is swallowed and progress stops.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

from rich.console import Console

from loadgen.cli.progress.display import Display, LiveDisplay, PlainDisplay, QuietDisplay
from loadgen.cli.progress.follow import Follower
from loadgen.cli.progress.model import RunProgress, Snapshot
from loadgen.cli.progress.text import BUFFERED, clock
from loadgen.core.errors import visible
from loadgen.studies.events import (
    BootRequest,
    BootStarted,
    CellEnded,
    CellStarted,
    EngineReady,
    EngineStarting,
    LoadEnded,
    LoadStarted,
    Probing,
    ProgressEvent,
    RunEnded,
    UiNotice,
    UiReady,
)


class ProgressPrinter:
    """A ``loadgen.studies.events.Progress`` callback drawing on one display."""

    def __init__(self, display: Display) -> None:
        self.display = display
        self.follower: Follower | None = None
        self.last: Snapshot | None = None  # the last run's final snapshot
        self._started_at = 0.0
        self._cell = ""  # "cell 2 of 4 (name): " while a matrix cell runs
        self._boot = ""  # "boot 3 of 6: " while a cold-boot study runs
        self._boot_failed = 0  # this boot's requests that failed
        self._ui = ""  # what a web UI session waits for between runs
        self._broken = False
        self._said_buffered = False  # the run's background was found buffered, and the display told

    def __call__(self, event: ProgressEvent) -> None:
        if self._broken:
            return
        try:
            self._handle(event)
        except Exception:  # noqa: BLE001 - showing progress must never end a study
            self._broken = True

    def _where(self, text: str) -> str:
        return visible(f"{self._cell}{self._boot}{text}")

    def _handle(self, event: ProgressEvent) -> None:
        d = self.display
        match event:
            case EngineStarting(kind=kind, exposed=exposed):
                if exposed is not None:
                    d.note(
                        self._where(
                            f"warning: the {kind} engine listens on {exposed} (the scenario's launcher host or "
                            "--host): anyone who can reach this machine can send it requests"
                        )
                    )
                d.status(self._where(f"starting the {kind} engine"))
            case EngineReady(url=url, seconds=seconds):
                d.note(self._where(f"engine ready at {url} in {seconds:.1f} s"))
            case Probing(base_url=url):
                d.status(self._where(f"probing {url}"))
            case LoadStarted(run_dir=run_dir, scenario=scenario):
                d.note(self._where(f"run folder {run_dir}"))
                started_at = self._started_at = time.monotonic()
                self._said_buffered = False
                show = partial(self._show, started_at=started_at)
                self.follower = Follower(run_dir, RunProgress(scenario), show).start()
            case LoadEnded(reporting=reporting):
                self._end_load()
                if reporting:
                    d.status(self._where("writing the reports"))
            case UiReady(url=url, log=log):
                self._ui = f"web UI at {url}: waiting for a start from its form (Ctrl-C ends the session)"
                d.note(visible(f"web UI at {url}; Locust's log: {log}"))
                d.status(visible(self._ui))
            case UiNotice(text=text):
                d.note(visible(text))
            case RunEnded():
                if self._ui:
                    d.status(visible(self._ui))
            case CellStarted(index=i, cells=n, name=name):
                self._cell = f"cell {i} of {n} ({name}): "
                d.note(visible(f"cell {i} of {n}: {name}"))
            case CellEnded(index=i, cells=n, name=name, status=status, wall_s=wall_s):
                self._cell = self._boot = ""
                d.note(visible(f"cell {i} of {n}: {name} {status} in {clock(wall_s)}"))
            case BootStarted(boot=j, boots=m):
                self._boot, self._boot_failed = f"boot {j} of {m}: ", 0
                d.status(self._where("starting the engine"))
            case BootRequest(done=done, total=total, ok=ok):
                self._boot_failed += not ok
                failed = f", {self._boot_failed} failed" if self._boot_failed else ""
                d.count(self._where(f"{done} of {total} requests back{failed}"), done, total)

    def _show(self, snap: Snapshot, started_at: float) -> None:
        if snap.buffered and not self._said_buffered:  # once per run
            self._said_buffered = True
            self.display.note(self._where(BUFFERED))
        self.display.run(snap, started_at)

    def _end_load(self) -> None:
        if self.follower is None:
            return
        follower, self.follower = self.follower, None
        snap = self.last = follower.stop()
        took = clock(time.monotonic() - self._started_at)
        self.display.note(self._where(f"load done: {snap.done}/{snap.quota} canaries, {snap.errors} errors in {took}"))

    def out(self, lines: list[str]) -> None:
        """Lines for standard output while the display is open (a web UI run's summary and folder)."""
        self.display.out(lines)

    def close(self) -> None:
        if self.follower is not None:
            self.follower.stop()
            self.follower = None
        self.display.close()


def open_display(quiet: bool) -> Display:
    """Nothing with ``quiet``; the live view when standard error is a terminal; plain lines otherwise."""
    if quiet:
        return QuietDisplay()
    console = Console(stderr=True)
    if console.is_terminal and not console.is_dumb_terminal:
        return LiveDisplay(console)
    return PlainDisplay(sys.stderr)


@contextmanager
def progress_shown(quiet: bool) -> Iterator[ProgressPrinter]:
    """A progress callback for one command; the display is closed (the live view erased) on the way out."""
    printer = ProgressPrinter(open_display(quiet))
    try:
        yield printer
    finally:
        printer.close()
