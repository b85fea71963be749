"""``loadgen run``: one command from a scenario file to a reported run folder.

Why: a user should not have to start an engine, prepare a folder, drive Locust and call the report
by hand. Headless, this module validates and probes in this process (clean errors, before any
traffic), starts an engine when no endpoint is given (the scenario's ``[launcher]``, else the
embedded engine), runs Locust in a child process (gevent's patching stays out of this one), then
finishes the manifest and writes the reports.
With ``RunRequest.ui`` it hands the validated options to Locust's web UI, where each start prepares and
reports its own run folder. Library first: the CLI only parses arguments and renders errors.

Options are checked before the probe (``--out`` must be a writable folder, ``--processes`` sane), so
bad ones fail before any traffic. Every child (the engine, Locust and its workers) runs under
``loadgen.launchers.guard`` and dies with this process, even when it is killed with SIGKILL; the
engine's log is kept in the run folder from the moment the folder exists, so a killed run keeps it.

Why this length: the headless and web-UI paths share the engine start, the option checks and the signal
forwarding that make every child die with this process; split, that guarantee would be spread over modules
that each hold part of it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from loadgen.core.errors import EngineError, UsageError
from loadgen.core.manifest import EngineFacts, EngineStarted, RunStatus
from loadgen.core.request import RunRequest, WebUi
from loadgen.core.runfiles import open_append
from loadgen.core.scenario import LauncherSpec, Scenario, TopologySpec, with_overrides
from loadgen.core.scenario.phase import parse_phase
from loadgen.launchers.commands import exposed_host
from loadgen.launchers.guard import spawn
from loadgen.launchers.launcher import Launcher
from loadgen.launchers.process import RunningEngine, keep_failed_log, start_embedded
from loadgen.launchers.router_check import require_router
from loadgen.launchers.step_trace import trace_env
from loadgen.launchers.topology import RunningTopology, keep_failed_logs, start_topology
from loadgen.load.options import StartedEngine
from loadgen.load.rescore_alone import rescore_alone
from loadgen.runs.lifecycle import OwnedRun
from loadgen.runs.prepare import api_key_of, prepare_run
from loadgen.studies.events import (
    EngineReady,
    EngineStarting,
    LoadEnded,
    LoadStarted,
    Probing,
    Progress,
    UiReady,
    no_progress,
)
from loadgen.studies.ui_session import LOG_NAME, UiSession, Watcher

LOCUSTFILE = Path(__file__).parents[1] / "load" / "locustfile.py"
STOP_TIMEOUT_S = 30.0  # background requests in flight at the end get this long to finish, then are cut
MAX_PROCESSES = 1024  # Locust worker processes: beyond any host's cores, and a typo would fork without end


@dataclass
class RunResult:
    run_dir: Path  # the run folder (headless; web UI: the last run's, else the folder that receives them)
    # the run's final status; after a web UI session its last run's (Ctrl-C while one goes: interrupted), None if none
    status: RunStatus | None
    locust_exit: int
    headline: list[str] = field(default_factory=list)  # said first: the endpoint failed, records were lost
    runs: list[Path] = field(default_factory=list)  # a web UI session's: every run started from it, in order


def _locust_base(base_url: str, scenario_path: str, out_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-P",
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--host",
        base_url,
        "--scenario",
        scenario_path,
        "--out-dir",
        str(out_dir),
        "--stop-timeout",
        f"{STOP_TIMEOUT_S:g}",
        "--exit-code-on-error",
        "0",
    ]


def headless_command(run_dir: Path, base_url: str, scenario_path: str, *, processes: int = 0) -> list[str]:
    cmd = [
        *_locust_base(base_url, scenario_path, run_dir.parent),
        "--run-dir",
        str(run_dir),
        "--headless",
        "--only-summary",
        "--loglevel",
        "INFO" if processes else "WARNING",
        "--csv",
        str(run_dir / "locust"),
        "--html",
        str(run_dir / "locust.html"),
    ]
    if processes:
        # a worker that dies takes its users with it: rebalancing restarts them (the canary user too) elsewhere;
        # master and workers talk on a free loopback port, never on every interface, never on a busy default
        port = str(free_port())
        cmd += [
            "--processes",
            str(processes),
            "--enable-rebalancing",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            port,
            "--master-port",
            port,
        ]
    return cmd


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ui_command(
    scenario: Scenario, scenario_path: str, out_dir: Path, ui: WebUi, *, started: StartedEngine | None = None
) -> list[str]:
    """Locust's web UI on the scenario. A start from its form runs against this host and scenario, into this
    folder, unless ``ui.allow_changes``; ``ui.login``: Locust asks for the user and password from the environment
    (``loadgen.load.options.web_credentials``); ``started``: the engine started here for it, which every run
    folder records as a headless run's does."""
    assert scenario.endpoint.base_url is not None
    labels = ",".join(f"{k}={v}" for k, v in scenario.labels.items())
    ui_flags = [*(["--web-login"] if ui.login else []), *(["--ui-allow-changes"] if ui.allow_changes else [])]
    return [
        *_locust_base(scenario.endpoint.base_url, scenario_path, out_dir),
        "--levels",
        ",".join(map(str, scenario.sweep.levels)),
        "--canaries-per-level",
        str(scenario.sweep.canaries_per_level),
        "--labels",
        labels,
        "--web-host",
        ui.host,
        "--web-port",
        str(ui.port),
        *ui_flags,
        *(["--started-engine", started.to_option()] if started is not None else []),
    ]


def started_engine(scenario: Scenario, engine: Started, facts: EngineFacts) -> StartedEngine:
    """What the web UI's run folders record of the engine started here: its facts (the manifest's ``engine``),
    the engines behind its URL (a topology's), and the logs each run folder keeps a copy of."""
    assert scenario.endpoint.base_url is not None
    logs = engine.logs() if isinstance(engine, RunningTopology) else [engine]
    return StartedEngine(
        url=scenario.endpoint.base_url,
        facts=facts,
        logs=[str(e.log_path.resolve()) for e in logs],
        servers=list(scenario.endpoint.servers),
    )


def _web_url(host: str, port: int) -> str:
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def _run_ui(cmd: list[str], out_dir: Path, url: str, progress: Progress) -> RunResult:
    """Locust's web UI until it exits; its output goes to ``out_dir/locust-ui.log``, read as it grows
    (``loadgen.studies.ui_session``) so that ``progress`` hears of each run started from the UI."""
    log_path = out_dir / LOG_NAME
    out_dir.mkdir(parents=True, exist_ok=True)  # checked writable (``check_options``), not left made
    with open_append(log_path) as log:  # as the run folders' logs are: never through a link in its place
        offset = os.fstat(log.fileno()).st_size
        progress(UiReady(url, log_path))
        proc = spawn(cmd, stdout=log, stderr=subprocess.STDOUT)
    session = UiSession(log_path, offset, progress)
    watcher = Watcher(session)
    try:
        code = _wait_forwarding_signals(proc)
    finally:
        runs = watcher.stop()
    return RunResult(runs[-1] if runs else out_dir, session.last_status, code, runs=runs)


def check_options(out_dir: Path, processes: int) -> None:
    """Refuse unusable options before any traffic: after the probe they would end in a traceback.

    ``out_dir`` must be a folder run folders can be created in: tried for real (missing folders made, a
    temporary file written, then all of it removed again), since permissions alone do not say (root, a
    read-only or virtual file system). ``processes`` is -1 (one per core), 0 (one process) or at most
    ``MAX_PROCESSES``."""
    if not -1 <= processes <= MAX_PROCESSES:
        raise UsageError(f"--processes {processes}: expected -1 (one per core), 0 (one process) or 1..{MAX_PROCESSES}")
    for attempt in range(_OUT_TRIES):
        try:
            _try_out_dir(out_dir)
            return
        except FileNotFoundError as exc:
            # another loadgen probing the same --out (matrix shares started together) removed a folder it had
            # made for its own probe while this one was inside it: try again
            if attempt == _OUT_TRIES - 1:
                raise UsageError(f"--out {out_dir}: cannot create run folders there ({exc.strerror})") from None
        except OSError as exc:
            raise UsageError(f"--out {out_dir}: cannot create run folders there ({exc.strerror or exc})") from None


_OUT_TRIES = 5


def _try_out_dir(out_dir: Path) -> None:
    """Make the missing folders of ``out_dir``, write a temporary file in it, then remove what was made."""
    made: list[Path] = []
    try:
        _make_missing(out_dir, made)
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    finally:
        _remove_if_empty(made)


def _make_missing(out_dir: Path, made: list[Path]) -> None:
    """Make the missing folders of ``out_dir``, outermost first, each appended to ``made`` once made here (one
    another process made meanwhile is not)."""
    for part in [*reversed(out_dir.parents), out_dir]:
        if part.is_dir():
            continue
        try:
            part.mkdir()
        except FileExistsError:
            if part.is_dir():
                continue  # made by another process just now: not this one's to remove
            what = "is a file" if part == out_dir else f"cannot be made: {part} is a file"
            raise UsageError(f"--out {out_dir}: {what}, not a folder (the folder that receives run folders)") from None
        made.append(part)


def _remove_if_empty(made: list[Path]) -> None:
    """Remove the folders in ``made``, innermost first, each only while it is empty: one holding a run folder (or
    another process's) stays."""
    for part in reversed(made):
        with suppress(OSError):
            part.rmdir()


def _engine_tmp(log_dir: Path | None, made: list[Path]) -> Path:
    """A temporary folder for the engine's log inside ``log_dir``, its missing folders made (and listed in
    ``made``, for ``_remove_if_empty`` once the engine is gone); another loadgen sharing ``--out`` may remove a
    folder it made (its own engine failed) between the two steps: then tried again."""
    for _ in range(_OUT_TRIES - 1):
        with suppress(FileNotFoundError):
            return _made_tmp(log_dir, made)
    return _made_tmp(log_dir, made)


def _made_tmp(log_dir: Path | None, made: list[Path]) -> Path:
    if log_dir is not None:
        _make_missing(log_dir, made)
    return Path(tempfile.mkdtemp(prefix=".loadgen-engine-", dir=log_dir))


def _wait_forwarding_signals(proc: subprocess.Popen[bytes]) -> int:
    """Wait for Locust; on SIGTERM or Ctrl-C let it stop gracefully so the manifest and records are finished.
    Then no process of its group may outlive it (a worker whose master failed would wait for it forever)."""
    try:
        return _wait(proc)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def _wait(proc: subprocess.Popen[bytes]) -> int:

    def forward(_signum: int, _frame: object) -> None:
        # SIGINT, not SIGTERM: a Locust run with a load shape stops gracefully on SIGINT (users finish or are
        # recorded as cancelled), while SIGTERM would end it before its handler is installed
        proc.send_signal(signal.SIGINT)

    # Ctrl-C too, by handler rather than KeyboardInterrupt: started from `nohup` or a shell's `&`, SIGINT comes in
    # ignored and Python would never raise it, yet a `kill -INT` is still meant to stop the run (Locust runs in its
    # own session, so a terminal's Ctrl-C reaches only this process: it is passed on here)
    previous = {signum: signal.signal(signum, forward) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        return proc.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


Started = RunningEngine | RunningTopology  # what endpoint_for started: one engine, or a topology


def keep_logs_in(started: Started | None, folder: Path) -> None:
    """The started processes' logs renamed into ``folder`` (``engine.log``; a topology's one per process)."""
    if isinstance(started, RunningTopology):
        started.move_logs(folder)
    elif started is not None:
        started.move_log(folder / "engine.log")


@contextmanager
def endpoint_for(
    scenario: Scenario,
    engine_args: list[str],
    launcher: LauncherSpec | None = None,
    *,
    topology: TopologySpec | None = None,
    log_dir: Path | None = None,
    progress: Progress = no_progress,
) -> Iterator[tuple[Scenario, Started | None, EngineFacts | None]]:
    """The scenario with a base URL: its own, or an engine started here and stopped on exit: ``launcher``,
    else the scenario's ``[launcher]``, else the embedded engine (``engine_args`` appended to its arguments);
    with ``topology`` (else the scenario's ``[topology]``) in mode pd or reload, its engines and router
    (``loadgen.launchers.topology``): the base URL is the router's and ``endpoint.servers`` the engines.

    The engine logs into a temporary folder inside ``log_dir`` (the run folders' parent), so that
    ``keep_logs_in`` can rename the logs into the run folder once it exists; it is told to write its step trace
    there too (``LOADGEN_STEP_TRACE``), and the trace's files follow the logs (``loadgen.launchers.step_trace``).
    ``progress`` hears
    when an engine starts and how long it took to answer."""
    if scenario.endpoint.base_url is not None:
        yield scenario, None, None
        return
    spec = launcher or scenario.launcher
    topo = topology or scenario.topology
    pd = topo is not None and topo.mode != "colocated"
    kind = "embedded" if spec is None else spec.kind
    shown_kind = f"{kind} {'prefill/decode' if topo and topo.mode == 'pd' else 'reload'}" if pd else kind
    if pd:
        require_router(kind, topo)  # missing, it would fail only once the engines are up
    progress(EngineStarting(shown_kind, exposed_host(spec or LauncherSpec(), engine_args)))
    t0 = time.monotonic()
    made: list[Path] = []  # the folders of ``log_dir`` made here: removed on the way out while empty (a failed start)
    tmp = _engine_tmp(log_dir, made)
    failed_to = log_dir or Path.cwd()  # a failed start keeps its log here: the tmp folder goes on the way out
    try:
        if topo is not None and pd:
            base = (spec or LauncherSpec()).model_copy(update={"args": [*(spec.args if spec else []), *engine_args]})
            try:
                running = start_topology(base, topo, topo.mode, tmp, env=trace_env(tmp))
            except EngineError as exc:
                raise keep_failed_logs(exc, tmp, failed_to) from None
            with running:
                progress(EngineReady(running.url, time.monotonic() - t0))
                labels = {"engine": base.kind, "topology": topo.mode, **scenario.labels}
                servers = running.endpoint_servers()
                resolved = with_overrides(scenario, base_url=running.url, labels=labels, servers=servers)
                yield resolved, running, running.describe()
        elif spec is None:
            try:
                embedded = start_embedded(engine_args, log_path=tmp / "engine.log", env=trace_env(tmp))
            except EngineError as exc:
                raise keep_failed_log(exc, tmp / "engine.log", failed_to) from None
            with embedded as engine:
                progress(EngineReady(engine.url, time.monotonic() - t0))
                labels = {
                    "engine": "embedded",
                    **({"engine_args": " ".join(engine_args)} if engine_args else {}),
                    **scenario.labels,
                }
                info: EngineFacts = {"kind": "embedded", "command": engine.command[1:]}
                yield with_overrides(scenario, base_url=engine.url, labels=labels), engine, info
        else:
            spec = spec.model_copy(update={"args": [*spec.args, *engine_args]})
            with Launcher(spec, env=trace_env(tmp)) as started:
                try:
                    engine = started.start(tmp / "engine.log")
                except EngineError as exc:
                    raise keep_failed_log(exc, tmp / "engine.log", failed_to) from None
                progress(EngineReady(engine.url, time.monotonic() - t0))
                labels = {"engine": spec.kind, **scenario.labels}
                yield with_overrides(scenario, base_url=engine.url, labels=labels), engine, started.describe()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_if_empty(made)


def run(request: RunRequest, *, progress: Progress = no_progress) -> RunResult:
    """Run ``request`` headless (or open the web UI, ``request.ui``); ``progress`` hears the engine start, the
    probe, the load's start and end (``loadgen.studies.events``), and must not raise."""
    source = request.source
    out_dir = request.out_dir
    check_options(out_dir, request.processes)
    scenario = request.scenario()
    if request.processes and parse_phase(scenario.background.phase).aimed:
        raise UsageError(
            f'--processes {request.processes}: background.phase = "{scenario.background.phase}" needs the canary user '
            "and the background in one process (the canary's tokens time the background): leave --processes out"
        )
    started = endpoint_for(
        scenario,
        list(request.engine_args),
        request.launcher,
        topology=request.topology,
        log_dir=out_dir,
        progress=progress,
    )
    with started as (scenario, engine, engine_info):
        assert scenario.endpoint.base_url is not None
        if (ui := request.ui) is not None:
            with_engine = started_engine(scenario, engine, engine_info) if engine and engine_info else None
            cmd = ui_command(scenario, source, out_dir, ui, started=with_engine)
            return _run_ui(cmd, out_dir, _web_url(ui.host, ui.port), progress)
        engine_info = engine_info or request.engine_facts
        # an engine started here was told to write its step trace (``endpoint_for``)
        extra: EngineStarted = {"step_trace_requested": engine is not None}
        if engine_info:
            extra["engine"] = engine_info
        progress(Probing(scenario.endpoint.base_url))
        run_dir, manifest = prepare_run(scenario, source=source, out_dir=out_dir, extra=extra)
        keep_logs_in(engine, run_dir)
        # the engine is stopped by endpoint_for on the way out, after the reports: its log is in place already
        api_key = api_key_of(scenario, source)
        owned = OwnedRun.begin(run_dir, manifest, base_url=scenario.endpoint.base_url, api_key=api_key)
        owned.before_reports = rescore_alone  # the re-score check's alone pass (docs/design.md)
        try:
            with open_append(run_dir / "locust.log") as log:
                cmd = headless_command(run_dir, scenario.endpoint.base_url, source, processes=request.processes)
                progress(LoadStarted(run_dir, scenario))
                code = _wait_forwarding_signals(spawn(cmd, stdout=log, stderr=subprocess.STDOUT))
        finally:
            progress(LoadEnded(run_dir, reporting=request.report))
            gone = engine.exited() if isinstance(engine, RunningTopology) else []
            # which part of the endpoint failed: into the manifest by the end's own write, before the reports
            status = owned.end(report=request.report, notices_from_caller=gone)
    return RunResult(run_dir, status, code, [*gone, *owned.headline])
