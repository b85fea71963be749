"""The coordinator side of a run, in Locust's master or its only process: the run folder, the stages, the facts.

Why: one process decides which stage a run is in, for every user of every worker. It prepares the
run folder when no ``loadgen run`` did (a web UI start, plain ``locust -f``), sends the plan and
every stage change to the user side, counts the canaries they report, chooses the references once
the baseline is in, and at the end records the facts in the manifest (never a status: the run's
owner settles that, ``loadgen/runs/lifecycle.py``); when this process prepared the run it ends it too.

State: one ``CoordinatorSide`` per process, hung on Locust's ``Environment`` (``coordinator_side``);
it holds the run going now (``CoordinatorRun``, prepared at the shape's first tick, which comes
before ``test_start``, and dropped at ``test_stop``) and, for the web UI, only the live table and the
folder of the last run that ended. The web UI starts many runs in one process: each gets a fresh
``CoordinatorRun``. Locust imported here only for its types and runner classes; the locustfile
wires these methods to Locust's events and messages.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from locust.env import Environment
from locust.runners import MasterRunner

from loadgen.core.errors import LoadgenError, RunFolderError, UsageError
from loadgen.core.manifest import EngineStarted, RunStatus, read_manifest, update_manifest
from loadgen.core.request import RunRequest
from loadgen.core.runfiles import copy_file
from loadgen.core.scenario import Scenario, load_scenario, parse_scenario, with_overrides
from loadgen.core.scenario.phase import parse_phase
from loadgen.load.coordination import Coordinator, claim_stop
from loadgen.load.live import LiveTable, with_report
from loadgen.load.messages import CanaryDone, Inflight
from loadgen.load.options import RUN_ENDED, RUN_STARTED, Launch, RunOptions, StartedEngine, normalise
from loadgen.load.rescore_alone import rescore_alone
from loadgen.load.runstate import Plan
from loadgen.load.stages import StageTracker, build_stages
from loadgen.runs.lifecycle import OwnedRun
from loadgen.runs.prepare import api_key_of, prepare_run
from reports.model.report import Report
from scenarios import path_of

log = logging.getLogger("loadgen")
_ATTR = "loadgen_coordinator"  # the Environment attribute that holds this process's CoordinatorSide


@dataclass
class CoordinatorRun:
    """One run as its coordinator sees it: from the shape's first tick to ``test_stop``."""

    run_dir: Path
    coordinator: Coordinator
    owned: OwnedRun | None  # prepared here (web UI, plain ``locust -f``): this process ends the run too
    spawn_rate: float
    done: int = 0
    errors: int = 0  # canaries that failed, of ``done``
    trailing_errors: int = 0  # failures in a row since the last ok canary: an endpoint that died ends with many
    workers: dict[str, str] = field(default_factory=dict)  # worker name -> Locust client id, from their reports
    live: LiveTable = field(default_factory=LiveTable)
    references_sent: bool = False
    claim_max_rate: float | None = None  # sweep.claim_max_rate: a level ends early once the claim cannot hold
    per_canary: int = 0  # canaries per level and canary id
    engine: StartedEngine | None = None  # the engine ``loadgen run --ui`` started, where this run went to it


@dataclass(frozen=True)
class EndedRun:
    """What the web UI keeps showing of a run once it ended: its live table and its folder (the report)."""

    run_dir: Path
    rows: list[dict[str, Any]]


class CoordinatorSide:
    """This process's coordinator side: the launch options, the run going now, what the UI shows of the last."""

    def __init__(self, environment: Environment, launch: Launch) -> None:
        self.environment = environment
        self.launch = launch  # the options Locust started with, before a web UI start rewrote them
        self.run: CoordinatorRun | None = None
        self.ended: EndedRun | None = None
        self.owned_status: RunStatus | None = None  # the last run this process owned and ended: its final status
        self.owned_any = False

    def current(self) -> CoordinatorRun:
        """The run going now, prepared on first use: the shape's first tick comes before ``test_start``."""
        if self.run is None:
            run_dir, owned, started = self._prepare()
            plan = Plan.of(run_dir)
            scenario = parse_scenario(plan.scenario, f"{run_dir}/manifest.json")
            sweep = scenario.sweep
            aimed = one_process_phase(scenario, self.environment)  # a run folder made by hand with --processes
            stages = build_stages(sweep, len(scenario.canaries))
            tracker = StageTracker(stages, sweep.settle_timeout_s, held_first=not aimed)
            self.run = CoordinatorRun(
                run_dir,
                Coordinator(tracker),
                owned,
                sweep.spawn_rate,
                claim_max_rate=sweep.claim_max_rate,
                per_canary=sweep.canaries_per_level,
                engine=started,
            )
            self.environment.host = plan.base_url
            assert self.environment.runner is not None
            self.environment.runner.send_message("lg_plan", plan.to_msg())
            self._publish()
            log.info("%s%s", RUN_STARTED, run_dir)
        return self.run

    def _prepare(self) -> tuple[Path, OwnedRun | None, StartedEngine | None]:
        """The run folder, and the run this process owns: none when ``loadgen run`` prepared the folder and
        owns it (headless); else this process prepares a new one per start (web UI, plain ``locust -f``),
        begins it and ends it when the start is over."""
        opts = normalise(self.environment.parsed_options)
        if opts.run_dir:
            run_dir = Path(opts.run_dir)
            status = read_manifest(run_dir).run_status
            if status is None or status.ended:
                raise UsageError(f"{run_dir}: --run-dir must be a run folder that is not over yet (status {status})")
            return run_dir, None, None
        base_url = opts.host or self.environment.host or None
        request, scenario = self._start_scenario(opts, base_url)
        one_process_phase(scenario, self.environment)  # before a run folder is made for it
        started = self._started_engine(scenario)
        extra: EngineStarted = {}
        if started is not None:  # as a headless run records the engine it started (``loadgen.studies.run``)
            extra = {"engine": started.facts}
            if started.servers:
                scenario = with_overrides(scenario, servers=started.servers)
        source = request.source
        run_dir, manifest = prepare_run(scenario, source=source, out_dir=request.out_dir, extra=extra)
        keep_engine_logs(started, run_dir)
        owned = OwnedRun.begin(run_dir, manifest, base_url=base_url, api_key=api_key_of(scenario, source))
        owned.before_reports = rescore_alone  # the re-score check's alone pass (docs/design.md)
        return run_dir, owned, started

    def _started_engine(self, scenario: Scenario) -> StartedEngine | None:
        """The engine ``loadgen run --ui`` started, where this start runs against it (with
        ``--ui-allow-changes`` a start may point elsewhere: then the run records no engine)."""
        started = StartedEngine.of(self.launch.options_namespace())
        if started is None or (scenario.endpoint.base_url or "").rstrip("/") != started.url.rstrip("/"):
            return None
        return started

    def _start_scenario(self, opts: RunOptions, base_url: str | None) -> tuple[RunRequest, Scenario]:
        """The run a start asks for, and its scenario. Its API key goes only to the host the process was started
        with, whatever a web UI start asked for (with ``--ui-allow-changes`` the host may change; then the
        scenario may not name a key)."""
        request = RunRequest(
            path_of(opts.scenario),
            host=base_url,
            out_dir=Path(opts.out_dir),
            levels=None if opts.levels is None else tuple(opts.levels),
            canaries_per_level=opts.canaries_per_level,
            labels=opts.labels,
        )
        scenario = request.scenario()
        key, target = scenario.endpoint.api_key_env, scenario.endpoint.base_url
        if key is not None and target != (home := self._launch_target()):
            raise UsageError(
                f"{request.source}: its API key ({key}) is sent only to the host this process was started with "
                f"({home}), not to {target}"
            )
        return request, scenario

    def _launch_target(self) -> str | None:
        launched = normalise(self.launch.options_namespace())
        return launched.host or load_scenario(path_of(launched.scenario)).endpoint.base_url

    def start_refusal(self, form: Mapping[str, str]) -> str | None:
        """Why a web UI start with this form must not go ahead, or None: ``Launch.refusal``, then the form's values
        as the start would read them (``--levels 0,abc``, a level past the sweep's bounds) and the key's host.
        Answered to the form, so its page shows why; found only once the start went, the reason would reach
        the log alone and the page would show an empty stopped run."""
        if why := self.launch.refusal(form):
            return why
        try:
            opts = normalise(self.launch.options_namespace(form))
            self._start_scenario(opts, opts.host or self.environment.host or None)
        except LoadgenError as exc:
            return str(exc)
        return None

    def _publish(self) -> None:
        if self.run is not None and self.environment.runner is not None:
            self.environment.runner.send_message("lg_stage", self.run.coordinator.snapshot().to_msg())

    def on_inflight(self, msg: Any, **_: Any) -> None:
        """``lg_inflight``: a user-side process's busy background users (``loadgen/load/user_side.py``), and its
        word that a stage's background failed for good, which ends that level early."""
        st = self.run
        if st is None:
            return
        got = Inflight.from_msg(msg.data)
        st.workers[got.worker] = str(msg.node_id)
        failed = got.failing
        tracker = st.coordinator.tracker
        ended = len(tracker.ended_by_background)
        publish = st.coordinator.on_inflight(got.worker, got.users, got.held, time.monotonic(), failed)
        if failed is not None and len(tracker.ended_by_background) > ended:
            log.warning(
                "level %s ended early: its background failed for good (%s: %d of %d failed; first refused: %s)",
                tracker.ended_by_background[-1]["level"],
                got.worker,
                failed.background_errors,
                failed.background_requests,
                failed.first_error,
            )
        if publish:
            self._publish()

    def on_done(self, msg: Any, **_: Any) -> None:
        """``lg_done``: one canary completed (``loadgen.load.users.done_summary``)."""
        st = self.run
        if st is None:
            return
        done = CanaryDone.from_msg(msg.data)
        st.done += 1
        failed = done.status != "ok"
        st.errors += failed
        st.trailing_errors = st.trailing_errors + 1 if failed else 0
        st.live.add(done)
        stage_index = done.stage
        current = st.coordinator.tracker.current
        stop = None
        if current is not None and not current.burst and stage_index == st.coordinator.tracker.index:
            canary, level = done.canary, done.level
            diverged = st.live.diverged(canary, level)
            stop = claim_stop(
                st.claim_max_rate, st.per_canary, phase=done.phase, level=level, canary=canary, diverged=diverged
            )
            if stop is not None:
                log.info("level %s ended early: %s", level, stop.reason)
        st.coordinator.on_done(stage_index, time.monotonic(), stop)
        stage = st.coordinator.tracker.current
        if not st.references_sent and (stage is None or stage.phase == "sweep"):
            st.references_sent = True
            if refs := st.live.choose_references():
                assert self.environment.runner is not None
                self.environment.runner.send_message("lg_reference", {"refs": refs})
        self._publish()

    def live_rows(self) -> list[dict[str, Any]]:
        """The web UI's live table: the run going now, else the last one that ended."""
        if self.run is not None:
            return self.run.live.rows()
        return self.ended.rows if self.ended is not None else []

    def latest_report(self) -> Path | None:
        """The newest report there is: written when a run ends, so while one runs this is the previous run's."""
        for st in (self.run, self.ended):
            if st is not None and (st.run_dir / "report.html").exists():
                return st.run_dir / "report.html"
        return None

    def _vanished_workers(self, st: CoordinatorRun) -> list[str]:
        runner = self.environment.runner
        if not isinstance(runner, MasterRunner) or not st.workers:
            return []
        alive = {c.id for c in runner.clients.all if c.state != "missing"}
        return sorted(name for name, client_id in st.workers.items() if client_id not in alive)

    def finish(self) -> None:
        """``test_stop``: record the run's facts in its manifest and, if this process owns the run, end it."""
        st, self.run = self.run, None
        if st is None:
            return
        rows = st.live.rows()
        self.ended = EndedRun(st.run_dir, rows)
        tracker = st.coordinator.tracker
        vanished = self._vanished_workers(st)
        if vanished:
            log.warning("workers vanished during the run: %s", ", ".join(vanished))
        try:
            update_manifest(
                st.run_dir,
                stages_finished=tracker.finished,
                canaries_reported=st.done,
                canary_errors=st.errors,
                canary_errors_trailing=st.trailing_errors,
                unsettled_levels=tracker.unsettled_levels,
                levels_ended_by_claim=tracker.ended_early,
                levels_ended_by_background=tracker.ended_by_background,
                workers=sorted(st.workers),
                workers_vanished=vanished,
            )
        except OSError as exc:  # a full disk: the owner still ends the run, and says what it could not write
            log.error("%s: cannot record the run's facts (%s)", st.run_dir / "manifest.json", exc.strerror or exc)
        if st.owned is not None:
            keep_engine_logs(st.engine, st.run_dir)
            report = None
            try:
                st.owned.end()
                log.info("report: %s", st.run_dir / "report.html")
                report = written_report(st.run_dir)
            except LoadgenError as exc:
                log.error("report for %s failed: %s", st.run_dir, exc)
            self.owned_any, self.owned_status = True, st.owned.status  # as its end settled it
            # the table's report-only cells (drift, others, held throughout) from the report just written
            self.ended = EndedRun(st.run_dir, with_report(rows, report))
        log.info("%s%s", RUN_ENDED, st.run_dir)  # the last word on this run: ``loadgen run --ui`` reads it

    def exit_code(self) -> int | None:
        """This process's exit code as ``loadgen run`` gives a run's: 0 when the last run it owned finished, 1 when
        not; None when it owned none (``loadgen run`` owns a headless run and decides from its status). Plain
        ``locust -f`` would otherwise exit 1 on a good run: background requests cut off at the stop count as
        Locust failures (docs/running.md, "Distributed runs")."""
        if not self.owned_any:
            return None
        return 0 if self.owned_status == RunStatus.FINISHED else 1


def one_process_phase(scenario: Scenario, environment: Environment) -> bool:
    """Whether ``background.phase`` aims the background at one phase of the canary; ``UsageError`` where it does
    and Locust runs workers: the canary's tokens time the background (``loadgen.load.phase``), and only users of
    the canary user's own process see them."""
    phase = parse_phase(scenario.background.phase)
    if phase.aimed and isinstance(environment.runner, MasterRunner):
        raise UsageError(
            f'background.phase = "{phase}" needs the canary user and the background in one process (the '
            "canary's tokens time the background): run without --processes"
        )
    return phase.aimed


def written_report(run_dir: Path) -> Report | None:
    """The run's ``report.json`` as written at its end; None (and a warning) where it cannot be read back."""
    from reports.render.writer import load_report  # here: reports.render.writer carries the report stack (pandas)

    try:
        return load_report(run_dir / "report.json")
    except LoadgenError as exc:
        log.warning("web UI table: the report's own figures are not shown: %s", exc)
        return None


def keep_engine_logs(started: StartedEngine | None, run_dir: Path) -> None:
    """The started engine's logs, as they stand, copied into the run folder under their names (``engine.log``):
    at the start of a run and again at its end, as a headless run keeps them (the engine outlives the run and
    goes on writing to its own file)."""
    for log_path in started.logs if started is not None else []:
        try:
            copy_file(Path(log_path), run_dir / Path(log_path).name)  # never through a link planted in the folder
        except (OSError, RunFolderError) as exc:
            log.warning("engine log %s not copied into %s: %s", log_path, run_dir, exc)


def attach_coordinator(environment: Environment, launch: Launch) -> CoordinatorSide:
    side = CoordinatorSide(environment, launch)
    setattr(environment, _ATTR, side)
    return side


def coordinator_side(environment: Environment) -> CoordinatorSide:
    """This process's coordinator side, attached by the locustfile's ``init`` listener."""
    side = getattr(environment, _ATTR, None)
    assert isinstance(side, CoordinatorSide), "no coordinator side: the locustfile's init listener attaches it"
    return side
