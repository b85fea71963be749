"""Where progress is shown: a live view updated in place on a terminal, plain lines in a log, or nothing.

Why: a user at a terminal wants one view that changes in place (the current stage, a bar, the stages
so far); a CI log wants a line now and then that reads on its own; ``--quiet`` wants neither. All
three go to standard error, so standard output keeps what scripts read (``loadgen run`` prints its
run folder last there). The live view is drawn by rich (``Live``, transient: it is gone when the
command ends, and the lines written with ``note`` stay). Nothing here knows about studies or events
(``loadgen/cli/progress/printer.py`` turns those into calls).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import IO, Protocol

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from loadgen.cli.progress.model import Snapshot
from loadgen.cli.progress.text import progress_line, stage_figures, stage_name, totals

PLAIN_EVERY_S = 10.0  # plain mode: a progress line at least this often, besides one per finished stage


class Display(Protocol):
    def note(self, text: str) -> None:
        """A line that stays (an engine is ready, a cell ended)."""

    def status(self, text: str) -> None:
        """What is being done now; replaced by the next status or by run progress."""

    def count(self, text: str, done: int, total: int) -> None:
        """A count within the current step (a boot's requests back): a status on a terminal; in a log only the
        last (``done == total``) and, while it goes, a line now and then, never one per request."""

    def run(self, snap: Snapshot, started_at: float) -> None:
        """A run's progress; ``started_at`` is the ``time.monotonic()`` at which its load began."""

    def out(self, lines: list[str]) -> None:
        """Lines for standard output (a web UI run's end: its summary and folder), written between redraws."""

    def close(self) -> None: ...


def _print_out(lines: list[str]) -> None:
    sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.flush()


class QuietDisplay:
    def note(self, text: str) -> None:
        pass

    def status(self, text: str) -> None:
        pass

    def count(self, text: str, done: int, total: int) -> None:
        pass

    def run(self, snap: Snapshot, started_at: float) -> None:
        pass

    def out(self, lines: list[str]) -> None:
        _print_out(lines)

    def close(self) -> None:
        pass


class PlainDisplay:
    """Lines for a log: notes and statuses as they come, each finished stage once, and the whole state every
    ``every_s`` seconds while a run goes."""

    def __init__(self, stream: IO[str], *, every_s: float = PLAIN_EVERY_S) -> None:
        self.stream = stream
        self.every_s = every_s
        self._last_status = ""
        self._last_line = 0.0
        self._reported: set[int] = set()  # stages whose "done" line was written, for this run
        self._run_started: float | None = None
        self._written = time.monotonic()  # when the last line was written
        self._lock = threading.Lock()

    def _write(self, line: str) -> None:
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()
            self._written = time.monotonic()

    def note(self, text: str) -> None:
        self._write(text)

    def status(self, text: str) -> None:
        if text != self._last_status:
            self._last_status = text
            self._write(text + " ...")

    def count(self, text: str, done: int, total: int) -> None:
        if done >= total or time.monotonic() - self._written >= self.every_s:
            self._write(text)

    def run(self, snap: Snapshot, started_at: float) -> None:
        if started_at != self._run_started:  # a new run (a matrix runs several)
            self._run_started, self._reported, self._last_line = started_at, set(), time.monotonic()
        now = time.monotonic()
        finished = len(snap.stages) if snap.current is None else snap.current
        for stage in snap.stages[:finished]:
            if stage.index not in self._reported and stage.done:
                self._reported.add(stage.index)
                totals_then = totals(snap, now - started_at, through=stage.index)  # not later stages' canaries
                self._write(f"{stage_name(stage)} done: {stage_figures(stage)}; {totals_then}")
                self._last_line = now
        if snap.current is not None and now - self._last_line >= self.every_s:
            self._last_line = now
            self._write(f"progress: {progress_line(snap, now - started_at)}")

    def out(self, lines: list[str]) -> None:
        with self._lock:
            _print_out(lines)

    def close(self) -> None:
        pass


class LiveDisplay:
    """One view updated in place on a terminal: a spinner with the current status or stage, a bar over the
    run's canaries, and a table of the stages so far. Rich redraws it several times a second (the spinner
    and the elapsed time move even while no canary comes back)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._lock = threading.Lock()
        self._status = ""
        self._snap: Snapshot | None = None
        self._started_at = 0.0
        self._spinner = Spinner("dots")
        self._live = Live(
            self, console=console, refresh_per_second=8, transient=True, redirect_stdout=False, redirect_stderr=False
        )
        self._live.start()

    def note(self, text: str) -> None:
        self._live.console.print(Text(text), highlight=False)

    def status(self, text: str) -> None:
        with self._lock:
            self._status, self._snap = text, None

    def count(self, text: str, done: int, total: int) -> None:
        self.status(text)

    def run(self, snap: Snapshot, started_at: float) -> None:
        with self._lock:
            self._snap, self._started_at = snap, started_at

    def out(self, lines: list[str]) -> None:
        # not under the lock: stopping waits for the refresh thread, which takes it to draw
        self._live.stop()  # the view erased, the lines printed, the view drawn again below them
        try:
            _print_out(lines)
        finally:
            self._live.start()

    def close(self) -> None:
        self._live.stop()

    def __rich__(self) -> RenderableType:
        with self._lock:
            snap, started_at, status = self._snap, self._started_at, self._status
        if snap is None:
            self._spinner.update(text=Text(status))
            return self._spinner
        elapsed = time.monotonic() - started_at
        if snap.current is None:
            head = f"all stages done: {totals(snap, elapsed)}"
        else:
            head = f"{stage_name(snap.stages[snap.current])} (stage {snap.current + 1} of {len(snap.stages)}): "
            head += f"{totals(snap, elapsed)}, {snap.errors} errors"
        self._spinner.update(text=Text(head))
        bar = Table.grid(padding=(0, 1))
        bar.add_row(ProgressBar(total=max(snap.quota, 1), completed=snap.done, width=48), f"{snap.done}/{snap.quota}")
        return Group(self._spinner, bar, stage_table(snap))


def stage_table(snap: Snapshot) -> Table:
    """The stages begun so far, one row each, the current one marked."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name in ("stage", "canaries", "errors", "unique", "diverged", "held at send"):  # text.stage_figures
        table.add_column(name, justify="left" if name == "stage" else "right")
    for stage in snap.stages:
        if not stage.done and stage.index != snap.current:
            continue
        mark = "▸ " if stage.index == snap.current else "  "
        sweep = stage.phase == "sweep"
        table.add_row(
            mark + stage_name(stage),
            f"{stage.done}/{stage.quota}",
            str(stage.errors),
            "—" if stage.unique is None else str(stage.unique),
            "—" if stage.diverged is None or not sweep else str(stage.diverged),
            "—" if stage.held is None or not sweep or stage.burst or not stage.level else f"{stage.held}/{stage.level}",
        )
    return table
