"""The Locust side of a run: a canary user, background users, and the load shape that steps the levels.

Run it through ``loadgen run`` (headless, ``--processes N`` or ``--ui``) or as ``locust -f`` on this
file (also ``--master`` / ``--worker``). Importing it imports Locust and so gevent's monkey-patching:
nothing in ``reports`` may import it. Users are thin: stage arithmetic lives in ``loadgen.load.stages``
and ``loadgen.load.coordination``, request/timing/fault handling in ``loadgen.load.client``, dialects in
``loadgen.core.wire``, writing in ``collectors``.

Two sides, one code path: the coordinator side (master, or the local process) prepares the run
folder, owns the stage tracker and finishes the manifest; the user side (workers, or the local
process) runs the users and writes its own ``canaries-<worker>.jsonl``. They talk through Locust's
messages, which a local runner loops back in-process.

Locust itself imports (and monkey-patches) first: this file is only ever loaded by Locust's runner.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import gevent
import gevent.pool
import orjson
from locust import LoadTestShape, User, constant, events, task
from locust.env import Environment
from locust.event import EventHook
from locust.exception import StopUser
from locust.runners import MasterRunner, WorkerRunner
from locust.user.task import LOCUST_STATE_STOPPING

from collectors.client_cpu import ClientCpuWriter, client_cpu_path
from loadgen.core.errors import LoadgenError, UsageError
from loadgen.core.manifest import read_manifest, update_manifest
from loadgen.core.options import web_credentials
from loadgen.core.record import CanaryRecord
from loadgen.core.scenario import Scenario, load_scenario, parse_scenario, with_overrides
from loadgen.core.wire.urls import api_path
from loadgen.load.background import BackgroundBodies, BackgroundBody
from loadgen.load.bulk_stats import BulkStats
from loadgen.load.canary_request import canary_body, canary_record, prepare_cache
from loadgen.load.client import Outcome, make_client, send, send_payload
from loadgen.load.coordination import Coordinator, StageSnapshot, claim_stop
from loadgen.load.cpu_sampler import CpuSampler
from loadgen.load.holding import Progress, Slot, spawn_delay
from loadgen.load.live import LiveTable, summarise
from loadgen.load.options import Launch, RunOptions, add_arguments, normalise
from loadgen.load.runstate import Plan, RunState, state_from_plan
from loadgen.load.stages import StageTracker, Ticket, build_stages, users_for
from loadgen.load.webui import install_login, install_tab, protect
from loadgen.runs.lifecycle import OwnedRun
from loadgen.runs.prepare import api_key_of, prepare_run
from scenarios import path_of

log = logging.getLogger("loadgen")
_CANARY_USERS = 1
_POLL_S = 0.005
_PACE_POLL_S = 0.05
_REPORT_EVERY_S = 0.05
_PLAN_WAIT_S = 30.0


@dataclass
class CoordState:
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


_COORD: CoordState | None = None
_LAST: CoordState | None = None  # the previous run, for the web UI after it ended
_USER: RunState | None = None
_REPORTER: gevent.Greenlet | None = None
_BACKGROUND_STATS: BulkStats | None = None  # background requests for Locust's statistics, folded by _REPORTER
_CPU: CpuSampler | None = None  # this process's CPU use per interval and stage, for the report's client load
_LAUNCH = Launch({})  # the options Locust started with, before a web UI start rewrote them


# -- wiring ---------------------------------------------------------------------------------------


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    add_arguments(parser)


@events.init.add_listener
def _init(environment: Environment, **_: Any) -> None:
    global _LAUNCH
    _LAUNCH = Launch.of(environment.parsed_options)
    environment.events.canary_record = EventHook()  # type: ignore[attr-defined]
    runner = environment.runner
    if runner is None:
        return
    if not isinstance(runner, WorkerRunner):
        runner.register_message("lg_inflight", _on_inflight)
        runner.register_message("lg_done", _on_done)
    if not isinstance(runner, MasterRunner):
        runner.register_message("lg_plan", _on_plan)
        runner.register_message("lg_stage", _on_stage)
        runner.register_message("lg_reference", _on_reference)
    if (web_ui := environment.web_ui) is not None:
        install_tab(web_ui, table=_live_rows, report=_latest_report)
        protect(web_ui, bind_host=str(_LAUNCH.options.get("web_host") or ""), check_start=_start_refusal)
        if web_ui.web_login:
            user, password = web_credentials()
            install_login(web_ui, user=user, password=password)


def _worker_name(environment: Environment) -> str:
    runner = environment.runner
    return f"w{runner.client_id[-8:]}" if isinstance(runner, WorkerRunner) else ""


# -- coordinator side -----------------------------------------------------------------------------


def _prepare(environment: Environment) -> tuple[Path, OwnedRun | None]:
    """The run folder, and the run this process owns: none when ``loadgen run`` prepared the folder and
    owns it (headless); else this process prepares a new one per start (web UI, plain ``locust -f``),
    begins it and ends it when the start is over."""
    opts = normalise(environment.parsed_options)
    if opts.run_dir:
        run_dir = Path(opts.run_dir)
        status = read_manifest(run_dir).run_status
        if status is None or status.ended:
            raise UsageError(f"{run_dir}: --run-dir must be a run folder that is not over yet (status {status})")
        return run_dir, None
    base_url = opts.host or environment.host or None
    source, scenario = _start_scenario(opts, base_url)
    run_dir = prepare_run(scenario, source=source, out_dir=Path(opts.out_dir))
    return run_dir, OwnedRun.begin(run_dir, base_url=base_url, api_key=api_key_of(scenario, source))


def _start_scenario(opts: RunOptions, base_url: str | None) -> tuple[str, Scenario]:
    """The scenario a start runs. Its API key goes only to the host the process was started with, whatever
    a web UI start asked for (with ``--ui-allow-changes`` the host may change; then the scenario may not
    name a key)."""
    source = str(path_of(opts.scenario))
    scenario = with_overrides(
        load_scenario(Path(source)),
        base_url=base_url,
        levels=opts.levels,
        canaries_per_level=opts.canaries_per_level,
        labels=opts.labels,
    )
    key, target = scenario.endpoint.api_key_env, scenario.endpoint.base_url
    if key is not None and target != (home := _launch_target()):
        raise UsageError(
            f"{source}: its API key ({key}) is sent only to the host this process was started with ({home}), "
            f"not to {target}"
        )
    return source, scenario


def _launch_target() -> str | None:
    launched = normalise(_LAUNCH.options_namespace())
    return launched.host or load_scenario(path_of(launched.scenario)).endpoint.base_url


def _start_refusal(form: Mapping[str, str]) -> str | None:
    """Why a web UI start with this form must not go ahead (``Launch.refusal``, then the key's host), or None."""
    if why := _LAUNCH.refusal(form):
        return why
    if not _LAUNCH.allow_changes:
        return None  # host and scenario are the launch ones: the key goes where it was meant to
    try:
        opts = normalise(_LAUNCH.options_namespace(form))
        _start_scenario(opts, opts.host)
    except LoadgenError as exc:
        return str(exc)
    return None


def coordinator(environment: Environment) -> CoordState:
    """Prepared on first use: the shape's first tick comes before ``test_start``."""
    global _COORD
    if _COORD is None:
        run_dir, owned = _prepare(environment)
        plan = Plan.of(run_dir)
        scenario = parse_scenario(plan.scenario, f"{run_dir}/manifest.json")
        tracker = StageTracker(build_stages(scenario.sweep, len(scenario.canaries)), scenario.sweep.settle_timeout_s)
        _COORD = CoordState(
            run_dir,
            Coordinator(tracker),
            owned,
            scenario.sweep.spawn_rate,
            claim_max_rate=scenario.sweep.claim_max_rate,
            per_canary=scenario.sweep.canaries_per_level,
        )
        environment.host = plan.base_url
        assert environment.runner is not None
        environment.runner.send_message("lg_plan", plan.to_msg())
        _publish(environment)
        log.info("run folder: %s", run_dir)
    return _COORD


def _publish(environment: Environment) -> None:
    if _COORD is not None and environment.runner is not None:
        environment.runner.send_message("lg_stage", _COORD.coordinator.snapshot().to_msg())


def _on_inflight(environment: Environment, msg: Any, **_: Any) -> None:
    if _COORD is None:
        return
    data = msg.data
    _COORD.workers[data["worker"]] = str(msg.node_id)
    if _COORD.coordinator.on_inflight(data["worker"], data["users"], data["held"], time.monotonic()):
        _publish(environment)


def _on_done(environment: Environment, msg: Any, **_: Any) -> None:
    if _COORD is None:
        return
    _COORD.done += 1
    failed = msg.data.get("status") != "ok"
    _COORD.errors += failed
    _COORD.trailing_errors = _COORD.trailing_errors + 1 if failed else 0
    _COORD.live.add(msg.data)
    stage_index, data = int(msg.data["stage"]), msg.data
    current = _COORD.coordinator.tracker.current
    stop = None
    if current is not None and not current.burst and stage_index == _COORD.coordinator.tracker.index:
        canary, level = str(data["canary"]), data["level"]
        diverged = _COORD.live.diverged(canary, level)
        stop = claim_stop(
            _COORD.claim_max_rate, _COORD.per_canary, phase=data["phase"], level=level, canary=canary, diverged=diverged
        )
        if stop is not None:
            log.info("level %s ended early: %s", level, stop.reason)
    _COORD.coordinator.on_done(stage_index, time.monotonic(), stop)
    stage = _COORD.coordinator.tracker.current
    if not _COORD.references_sent and (stage is None or stage.phase == "sweep"):
        _COORD.references_sent = True
        if refs := _COORD.live.choose_references():
            assert environment.runner is not None
            environment.runner.send_message("lg_reference", {"refs": refs})
    _publish(environment)


def _live_rows() -> list[dict[str, Any]]:
    st = _COORD or _LAST
    return st.live.rows() if st is not None else []


def _latest_report() -> Path | None:
    """The newest report there is: written when a run ends, so while one runs this is the previous run's."""
    for st in (_COORD, _LAST):
        if st is not None and (st.run_dir / "report.html").exists():
            return st.run_dir / "report.html"
    return None


def _vanished_workers(environment: Environment, st: CoordState) -> list[str]:
    runner = environment.runner
    if not isinstance(runner, MasterRunner) or not st.workers:
        return []
    alive = {c.id for c in runner.clients.all if c.state != "missing"}
    return sorted(name for name, client_id in st.workers.items() if client_id not in alive)


def _finish_coordinator(environment: Environment) -> None:
    global _COORD, _LAST
    st, _COORD = _COORD, None
    if st is None:
        return
    _LAST = st
    tracker = st.coordinator.tracker
    vanished = _vanished_workers(environment, st)
    if vanished:
        log.warning("workers vanished during the run: %s", ", ".join(vanished))
    update_manifest(
        st.run_dir,
        stages_finished=tracker.finished,
        canaries_reported=st.done,
        canary_errors=st.errors,
        canary_errors_trailing=st.trailing_errors,
        unsettled_levels=tracker.unsettled_levels,
        levels_ended_by_claim=tracker.ended_early,
        workers=sorted(st.workers),
        workers_vanished=vanished,
    )
    if st.owned is not None:
        try:
            st.owned.end()
            log.info("report: %s", st.run_dir / "report.html")
        except LoadgenError as exc:
            log.error("report for %s failed: %s", st.run_dir, exc)


# -- user side ------------------------------------------------------------------------------------


def _on_plan(environment: Environment, msg: Any, **_: Any) -> None:
    global _USER, _REPORTER, _BACKGROUND_STATS, _CPU
    _finish_user()
    worker = _worker_name(environment)
    st = state_from_plan(Plan.from_msg(msg.data), worker=worker)
    st.canaries.register(environment.events.canary_record)  # type: ignore[attr-defined]
    environment.host = st.base_url
    _USER = st
    _write_process_file(st, finished=False)
    _BACKGROUND_STATS = BulkStats(environment.stats, "background")
    _REPORTER = gevent.spawn(_report_inflight, environment, st, _BACKGROUND_STATS)
    cpu_writer = ClientCpuWriter(client_cpu_path(st.run_dir, worker))
    _CPU = CpuSampler(cpu_writer, worker=st.worker, stage=partial(_stage_of, st))
    _CPU.start()


def _stage_of(st: RunState) -> tuple[int | None, str | None]:
    """(level, phase) of the stage this process last heard of; (None, None) before the first or after the last."""
    snap = st.mirror.snapshot
    return (None, None) if snap is None else (snap.level, snap.phase)


def _on_stage(environment: Environment, msg: Any, **_: Any) -> None:
    if _USER is not None:
        _USER.mirror.update(StageSnapshot.from_msg(msg.data))


def _on_reference(environment: Environment, msg: Any, **_: Any) -> None:
    if _USER is not None:
        _USER.references = dict(msg.data["refs"])


def _report_inflight(environment: Environment, st: RunState, stats: BulkStats) -> None:
    """Tell the coordinator, every few tens of milliseconds, how many background users are busy here;
    fold the background requests completed since into Locust's statistics."""
    assert environment.runner is not None
    while True:
        environment.runner.send_message(
            "lg_inflight", {"worker": st.worker, "users": st.holding.slots, "held": st.holding.held}
        )
        stats.fold()
        gevent.sleep(_REPORT_EVERY_S)


def _finish_user() -> None:
    global _USER, _REPORTER, _CPU
    if _CPU is not None:
        _CPU.stop()
        _CPU = None
    if _REPORTER is not None:
        _REPORTER.kill(block=False)
        _REPORTER = None
    if _BACKGROUND_STATS is not None:
        _BACKGROUND_STATS.fold()  # before Locust writes its final statistics or sends them to the master
    st, _USER = _USER, None
    if st is None:
        return
    st.close()
    _write_process_file(st, finished=True)


def _write_process_file(st: RunState, *, finished: bool) -> None:
    """``process-<worker>.json``: who wrote which files (pid), and at the end how much, with write failures."""
    info = {
        "worker": st.worker,
        "pid": os.getpid(),
        "finished": finished,
        "canaries_written": st.canaries.writer.written,
        "canary_write_failures": st.canaries.writer.failures,
        "background_written": st.background.writer.written,
        "background_write_failures": st.background.writer.failures,
    }
    (st.run_dir / f"process-{st.worker}.json").write_bytes(orjson.dumps(info))


def user_state(environment: Environment) -> RunState:
    """The plan arrives as a message before the first spawn; wait briefly rather than guess."""
    deadline = time.monotonic() + _PLAN_WAIT_S
    while _USER is None:
        if time.monotonic() > deadline:
            log.error("no run plan from the coordinator within %.0f s; stopping this user", _PLAN_WAIT_S)
            raise StopUser
        gevent.sleep(0.05)
    return _USER


@events.test_stop.add_listener
def _stop(environment: Environment, **_: Any) -> None:
    if not isinstance(environment.runner, MasterRunner):
        _finish_user()
    if not isinstance(environment.runner, WorkerRunner):
        _finish_coordinator(environment)


# -- users and shape ------------------------------------------------------------------------------


def _fire_stats(environment: Environment, name: str, out: Outcome) -> None:
    environment.events.request.fire(
        request_type="POST",
        name=name,
        response_time=(out.latency_s or 0.0) * 1000.0,
        response_length=out.response_bytes,
        context={},
        exception=out.failure(),
    )


def endpoint_client(st: RunState) -> Any:
    """A one-connection client to the run's endpoint with the scenario's timeouts and key."""
    ep = st.scenario.endpoint
    return make_client(
        st.base_url,
        connect_timeout_s=ep.connect_timeout_s,
        read_timeout_s=ep.read_timeout_s,
        api_key=st.api_key,
        request_timeout_s=ep.request_timeout_s,
        max_response_bytes=ep.max_response_bytes,
    )


def _stopping(user: User) -> bool:
    """Locust asked ``user`` to stop and waits for its current task to return (docs/design.md, "A graceful
    stop waits for each user's current task to return"): every loop inside a task asks this."""
    return bool(user._state == LOCUST_STATE_STOPPING)


class CanaryUser(User):
    """Sends the scenario's canaries one at a time, only when the current stage says so."""

    fixed_count = _CANARY_USERS
    wait_time = constant(0)

    def on_start(self) -> None:
        self.http = endpoint_client(user_state(self.environment))

    def on_stop(self) -> None:
        if _USER is not None:
            _USER.mirror.release()
        self.http.close()

    @task
    def canary(self) -> None:
        st = user_state(self.environment)
        while True:
            if st.mirror.finished:
                gevent.sleep(0.2)
                return
            if _stopping(self):
                return  # a stop (the web UI's button, Ctrl-C) while no ticket is held: nothing to finish
            if burst := st.mirror.take_burst():
                self._burst(st, burst)
                return
            if ticket := st.mirror.take_ticket():
                break
            gevent.sleep(_POLL_S)
        self._send(st, ticket, self.http)
        if st.scenario.sweep.canary_pace_s:
            gevent.sleep(st.scenario.sweep.canary_pace_s)

    def _burst(self, st: RunState, tickets: list[Ticket]) -> None:
        """Fire every copy at once, each on its own connection, as the original identical-requests experiment."""
        clients = [endpoint_client(st) for _ in tickets]
        group = gevent.pool.Group()
        try:
            for ticket, http in zip(tickets, clients, strict=True):
                group.spawn(self._send, st, ticket, http, burst=True)
            group.join()
        finally:
            group.kill()
            for http in clients:
                http.close()

    def _send(self, st: RunState, ticket: Ticket, http: Any, *, burst: bool = False) -> None:
        canary = st.scenario.canaries[ticket.canary_index]
        features = st.canary_body_features(ticket.canary_index)
        busy = burst or ticket.level > 0 or st.inflight.total > 0
        action, reset = prepare_cache(http, canary, st.scenario.endpoint.cache_reset_path, busy=busy)
        kind, body = canary_body(st.scenario, canary, model=st.model, features=features, salt=action == "salt")
        held = None if burst else _wait_held(st, ticket.level, stopping=partial(_stopping, self))
        if not burst and _stopping(self):
            return  # stopped while the level was being reached: a canary sent now would not share that level
        background_held = st.holding.held
        inflight_at_send = st.inflight.total
        st.inflight.canary += 1
        try:
            out = send(
                http,
                api_path(st.base_url, kind),
                kind,
                body,
                tokens_as_ids=features.tokens_as_ids,
                secret=st.api_key,
            )
        finally:
            st.inflight.canary -= 1
        record = canary_record(
            out,
            run_id=st.run_dir.name,
            canary=canary,
            kind=kind,
            body=body,
            phase=ticket.phase,
            level=ticket.level,
            inflight_at_send=inflight_at_send,
            worker=st.worker,
            cache_action=action,
            cache_reset=reset,
            burst=burst,
            held_at_send=held,
            background_held_at_send=None if burst else background_held,
        )
        self.environment.events.canary_record.fire(record=record)
        _fire_stats(self.environment, f"canary:{canary.id}", out)
        assert self.environment.runner is not None
        self.environment.runner.send_message("lg_done", done_summary(st, ticket, record))
        if out.cancelled:
            raise gevent.GreenletExit


def _wait_held(st: RunState, level: int, *, stopping: Callable[[], bool]) -> bool:
    """Wait until the level is held (docs/design.md, "held"): this process's background slots each hold a
    request the server has started and, in a distributed run, the coordinator's fresh view of every worker
    says the same; under non-streamed background the engine's own running count must reach the level too.
    False when ``settle_timeout_s`` passed first (the canary goes anyway, flagged) or when ``stopping()``
    says the user was asked to stop (the caller then sends nothing)."""
    deadline = time.monotonic() + st.scenario.sweep.settle_timeout_s
    while not stopping():
        asked_engine = False
        if _level_held(st, level):
            if st.scenario.background.stream or not level:
                return True
            asked_engine = True
            if st.engine.confirms(level):
                return True
        if time.monotonic() > deadline:
            return False
        # a /metrics request per 5 ms poll would load the engine while it catches up: ask it every 50 ms
        gevent.sleep(_PACE_POLL_S if asked_engine else _POLL_S)
    return False


def _wait_on_time(st: RunState, progress: Progress, max_tokens: int, handover_s: float) -> None:
    """A non-streamed request's hand-over point: when, at the pace this process's requests run at, it is
    about to end (re-read every few tens of ms: the pace is learnt, and changes with the level).

    Counted from when the request was sent (``progress.started_at``), never from this call: the slot's
    loop gets here only once the request before has ended, a hand-over after this one was sent, and
    counting from then put every second hand-over at the end of its request, with the slot empty."""
    while not progress.due.is_set():
        if not progress.started:  # spawned, not yet sent: its greenlet runs once this one waits
            progress.due.wait(_POLL_S)
            continue
        after = st.pace.handover_after(max_tokens, handover_s)
        left = _PACE_POLL_S if after is None else progress.started_at + after - time.perf_counter()
        if left <= 0:
            return
        progress.due.wait(min(left, _PACE_POLL_S))


def _level_held(st: RunState, level: int) -> bool:
    if level and not st.scenario.background.stream and st.pace.per_token_s is None:
        return False  # no non-streamed request has finished yet: slots cannot hand over on time
    h = st.holding
    if not st.distributed:
        return h.slots == level and h.held >= level
    snap = st.mirror.snapshot
    return h.all_held and snap is not None and snap.held


def done_summary(st: RunState, ticket: Ticket, record: CanaryRecord) -> dict[str, Any]:
    """A canary completion as the coordinator needs it: counters and hashes, small and msgpack-safe."""
    return summarise(
        canary=record.canary_id,
        stage=ticket.stage_index,
        phase=ticket.phase,
        level=ticket.level,
        status=record.status,
        token_ids=record.token_ids,
        tokens=record.tokens,
        text=record.text,
        reference=st.references.get(record.canary_id),
    )


class BackgroundUser(User):
    """One background slot: keeps a varied request in flight, handing over to the next before it ends.

    How the slot holds its level (a seeded first delay, started requests, hand-overs) is
    ``loadgen.load.holding``'s; this class only sends. A hand-over overlaps two requests, so the slot
    has two connections and alternates between them."""

    wait_time = constant(0)

    def on_start(self) -> None:
        st = user_state(self.environment)
        spec = st.scenario.background
        index = st.next_user_index()
        self.clients = [endpoint_client(st), endpoint_client(st)]
        self.turn = 0
        self.kind = spec.kind or st.scenario.endpoint.kind
        probed = st.features.get(self.kind)  # token counts on streamed answers only where the probe saw them
        self.bodies = BackgroundBodies(
            spec,
            index,
            kind=self.kind,
            model=st.model,
            stream=spec.stream,
            usage=probed is not None and probed.include_usage,
        )
        self.path = api_path(st.base_url, self.kind)
        self.slot = Slot(st.holding)
        self.children = gevent.pool.Group()
        st.holding.slots += 1
        gevent.sleep(spawn_delay(spec.seed, index, spec.spawn_jitter_s))

    def on_stop(self) -> None:
        self.children.kill()
        if _USER is not None:
            _USER.holding.slots -= 1
        for http in self.clients:
            http.close()

    @task
    def background(self) -> None:
        """Requests back to back until Locust asks this user to stop, in one task call.

        One task per request would add Locust's task scheduling and a zero-second wait (a hub switch) to
        every request; the loop checks the stop request Locust leaves (``_state``) after each request, so
        a stop ends it as promptly as a task boundary would. With ``wait_s`` each request is its own
        task, and the pause is taken in it as before."""
        st = user_state(self.environment)
        spec = st.scenario.background
        if spec.handover_s > 0 and not spec.wait_s:
            self._handing_over(st, spec.stream, spec.handover_s)
            return
        while True:
            self._one(st, self.bodies.next(), spec.stream)
            if spec.wait_s:
                gevent.sleep(spec.wait_s)
                return
            if _stopping(self):
                return

    def _handing_over(self, st: RunState, stream: bool, handover_s: float) -> None:
        """Each request runs in a child greenlet; near its end (or at its end) the next one starts: a streamed
        one when its tokens say so, a non-streamed one on time, at the pace this slot's requests ran at."""
        body = self.bodies.next()
        progress = Progress(self.slot, body.max_tokens, handover_s)
        current = self.children.spawn(self._one, st, body, stream, progress)
        while True:
            if stream:
                progress.due.wait()
            else:
                _wait_on_time(st, progress, body.max_tokens, handover_s)
            if _stopping(self):
                current.join()
                return
            body = self.bodies.next()
            following = Progress(self.slot, body.max_tokens, handover_s)
            successor = self.children.spawn(self._one, st, body, stream, following)
            current.join()
            current, progress = successor, following

    def _one(self, st: RunState, body: BackgroundBody, stream: bool, progress: Progress | None = None) -> None:
        snap = st.mirror.snapshot  # None or finished once the last canary is in: background drains until the stop
        level = snap.level if snap is not None else None
        http = self.clients[self.turn]
        self.turn ^= 1
        if progress is None:
            progress = Progress(self.slot, body.max_tokens, 0.0)
        if not stream:
            progress(0)  # a non-streamed request counts as started once sent
        st.inflight.background += 1
        try:
            out = send_payload(
                http,
                self.path,
                self.kind,
                body.payload,
                stream=stream,
                secret=st.api_key,
                usage_only=True,
                progress=progress if stream else None,
            )
        finally:
            st.inflight.background -= 1
            progress.done()
        usage = out.usage or {}
        if out.ok and not stream:
            tokens = usage.get("completion_tokens")
            st.pace.update(out.latency_s, tokens if isinstance(tokens, int) else body.max_tokens)
        st.background.on_request(
            {
                "level": level,
                "phase": (snap.phase if snap else None) or "drain",
                "sent_at": out.sent_at,
                "latency_s": out.latency_s,
                "ttft_s": out.ttft_s,
                "status": "ok" if out.ok else "error",
                "error_kind": out.error_kind,
                "http_status": out.http_status,
                "shared_prefix": body.shared_prefix,
                "prompt_tokens": usage.get("prompt_tokens"),
                "completion_tokens": usage.get("completion_tokens"),
            }
        )
        assert _BACKGROUND_STATS is not None  # set with the plan, before any user starts
        _BACKGROUND_STATS.add(out)
        if out.cancelled:
            raise gevent.GreenletExit


class LevelShape(LoadTestShape):
    """Holds ``level`` background users plus the canary user; stops when the last stage's quota is met."""

    use_common_options = False

    def tick(self) -> tuple[int, float, list[type[User]]] | None:
        env = self.runner.environment if self.runner else None
        if env is None:
            return None
        try:
            st = coordinator(env)
        except LoadgenError as exc:
            log.error("%s", exc)
            return None
        tracker = st.coordinator.tracker
        users = users_for(tracker.current, _CANARY_USERS)
        if users is None:
            return None
        return users, st.spawn_rate, [CanaryUser, BackgroundUser]
