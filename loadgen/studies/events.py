"""Progress events: what a long study tells whoever shows its progress, as typed values.

Why: ``loadgen run``, ``coldboot`` and ``matrix`` run for minutes, and a user (or a CI log) should see
where they are. The studies must not print (the CLI renders, docs/design.md), so each takes a
``progress`` callback and calls it with one of these events at the points worth showing; the default
callback does nothing. A run's per-canary progress is not sent as events: the CLI follows the run
folder's canary records itself (``loadgen/cli/progress``), so the Locust processes stay untouched.
Pure data: no I/O, no rendering.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loadgen.core.manifest import RunStatus
from loadgen.core.scenario import Scenario


@dataclass(frozen=True)
class EngineStarting:
    kind: str  # "embedded", or a launcher kind ("vllm", "sglang", "llamacpp", "command")
    exposed: str | None = None  # the address it listens on, where that is not a loopback one (said as a warning)


@dataclass(frozen=True)
class EngineReady:
    url: str
    seconds: float  # from the start of the process to its first healthy answer


@dataclass(frozen=True)
class Probing:
    base_url: str


@dataclass(frozen=True)
class LoadStarted:
    """Locust is starting on a prepared run folder; ``scenario`` is the resolved one (overrides applied)."""

    run_dir: Path
    scenario: Scenario


@dataclass(frozen=True)
class LoadEnded:
    run_dir: Path
    reporting: bool  # the reports are written next (the slow part of ending a large run)


@dataclass(frozen=True)
class UiReady:
    """``loadgen run --ui``: Locust's web UI is starting at ``url``; its own output goes to ``log``."""

    url: str
    log: Path


@dataclass(frozen=True)
class UiNotice:
    """A warning or error Locust's web UI process logged (a refused start, a failed report)."""

    text: str


@dataclass(frozen=True)
class RunEnded:
    """A run started from the web UI is over and its reports are written (or failed): its folder, its status."""

    run_dir: Path
    status: RunStatus | None


@dataclass(frozen=True)
class CellStarted:
    index: int  # 1-based
    cells: int
    name: str


@dataclass(frozen=True)
class CellEnded:
    index: int
    cells: int
    name: str
    status: RunStatus
    wall_s: float


@dataclass(frozen=True)
class BootStarted:
    boot: int  # 1-based
    boots: int


@dataclass(frozen=True)
class BootRequest:
    """One cold-boot request came back: ``done`` of ``total`` for this boot (every canary's requests)."""

    boot: int
    boots: int
    done: int
    total: int
    ok: bool


ProgressEvent = (
    EngineStarting
    | EngineReady
    | Probing
    | LoadStarted
    | LoadEnded
    | UiReady
    | UiNotice
    | RunEnded
    | CellStarted
    | CellEnded
    | BootStarted
    | BootRequest
)
Progress = Callable[[ProgressEvent], None]


def no_progress(_event: ProgressEvent) -> None:
    """The default callback: a study run as a library shows nothing."""
