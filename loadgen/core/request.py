"""One run asked for: what ``loadgen run``, a matrix cell, an onset level and a web UI start all hand over.

Why: a run was asked for by four callers through twenty keyword arguments, each applying the scenario's
overrides on its own. ``RunRequest`` is that request once, frozen, and ``RunRequest.scenario`` the one
place the overrides meet the scenario file. It lives in ``loadgen.core`` so that the web UI's start (in
the Locust process, without the studies stack) builds the same value. It must not start, probe or
prepare anything: that is ``loadgen.studies.run`` (headless) and ``loadgen.load.coordinator`` (web UI).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from loadgen.core.manifest import EngineFacts
from loadgen.core.scenario import LauncherSpec, Scenario, Server, TopologySpec, load_scenario, with_overrides


@dataclass(frozen=True)
class WebUi:
    """Locust's web UI instead of a headless run: where it listens, whether it asks for a login, and whether
    a start from its form may change host, scenario and folder."""

    host: str = "127.0.0.1"
    port: int = 8089
    login: bool = False
    allow_changes: bool = False


@dataclass(frozen=True)
class RunRequest:
    """A run of ``scenario_path`` into a new folder under ``out_dir``. ``host``, ``api_key_env``, ``levels``,
    ``canaries_per_level``, ``labels``, ``claim_max_rate`` and ``servers`` override the scenario's (None: the
    file's); ``servers`` are the engines behind ``host`` (a topology started by the caller) and ``engine_facts``
    what started them (the manifest's ``engine``). ``launcher`` and ``topology`` replace the scenario's when
    no ``host`` is given (a matrix cell's), ``engine_args`` go to the engine started here. ``processes``:
    Locust worker processes (0: one process); ``report``: write the reports at the end; ``ui``: open the web
    UI instead of running headless."""

    scenario_path: Path
    host: str | None = None
    api_key_env: str | None = None
    out_dir: Path = Path("runs")
    levels: tuple[int, ...] | None = None
    canaries_per_level: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    claim_max_rate: float | None = None
    servers: tuple[Server, ...] | None = None
    engine_facts: EngineFacts | None = None
    engine_args: tuple[str, ...] = ()
    launcher: LauncherSpec | None = None
    topology: TopologySpec | None = None
    processes: int = 0
    report: bool = True
    ui: WebUi | None = None

    @property
    def source(self) -> str:
        """The scenario file as errors and the manifest name it."""
        return str(self.scenario_path)

    def scenario(self) -> Scenario:
        """The scenario file with this request's overrides, validated as the file is."""
        return with_overrides(
            load_scenario(self.scenario_path),
            base_url=self.host,
            api_key_env=self.api_key_env,
            levels=None if self.levels is None else list(self.levels),
            canaries_per_level=self.canaries_per_level,
            labels=dict(self.labels),
            claim_max_rate=self.claim_max_rate,
            servers=None if self.servers is None else list(self.servers),
        )
