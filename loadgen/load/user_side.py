"""The user side of a run, in each Locust worker or the only process: the plan in, the records out.

Why: the users of one process share one view of the run (``loadgen.load.runstate.RunState``: the
plan, the stage mirror, the collectors), and around it the process keeps three things going for the
run: a greenlet that tells the coordinator every few tens of milliseconds how many background users
are busy here and whether a level's background failed for good here (docs/design.md, "Failing
background"), and folds the background requests into Locust's statistics; the CPU sampler; and
``process-<worker>.json`` (who wrote which files, with the counts and write failures at the end).

State: one ``UserSide`` per process, hung on Locust's ``Environment`` (``user_side``); it holds the
run this process takes part in now (``UserRun``, from the ``lg_plan`` message to ``test_stop``). A new
plan ends the previous run's part first, so a web UI start never sees the last run's state. Users
take their ``UserRun`` once, at their start (``UserSide.wait_run``), and keep it. The locustfile
wires these methods to Locust's events and messages.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import gevent
import orjson
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import WorkerRunner

from collectors.client_cpu import ClientCpuWriter, client_cpu_path
from loadgen.core.runfiles import write_file
from loadgen.load.bulk_stats import BulkStats
from loadgen.load.coordination import StageSnapshot
from loadgen.load.cpu_sampler import CpuSampler
from loadgen.load.messages import Inflight
from loadgen.load.runstate import Plan, RunState, state_from_plan

log = logging.getLogger("loadgen")
_ATTR = "loadgen_user_side"  # the Environment attribute that holds this process's UserSide
_REPORT_EVERY_S = 0.05
_PLAN_WAIT_S = 30.0


@dataclass
class UserRun:
    """One run as this process takes part in it: the users' shared state and what runs beside them."""

    state: RunState
    background_stats: BulkStats  # background requests for Locust's statistics, folded by ``reporter``
    reporter: gevent.Greenlet
    cpu: CpuSampler  # this process's CPU use per interval and stage, for the report's client load

    def close(self) -> None:
        self.cpu.stop()
        self.reporter.kill(block=False)
        self.background_stats.fold()  # before Locust writes its final statistics or sends them to the master
        self.state.close()
        _write_process_file(self.state, finished=True)


class UserSide:
    """This process's user side: the run it takes part in now, if any."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.run: UserRun | None = None

    def on_plan(self, msg: Any, **_: Any) -> None:
        """``lg_plan``: a run begins; open this process's record files and start what runs beside the users."""
        self.finish()
        env = self.environment
        runner = env.runner
        worker = f"w{runner.client_id[-8:]}" if isinstance(runner, WorkerRunner) else ""
        st = state_from_plan(Plan.from_msg(msg.data), worker=worker)
        st.canaries.register(env.events.canary_record)  # type: ignore[attr-defined]
        env.host = st.base_url
        _write_process_file(st, finished=False)
        stats = BulkStats(env.stats, "background")
        cpu_writer = ClientCpuWriter(client_cpu_path(st.run_dir, worker))
        cpu = CpuSampler(cpu_writer, worker=st.worker, stage=partial(_stage_of, st))
        self.run = UserRun(st, stats, gevent.spawn(_report_inflight, env, st, stats), cpu)
        cpu.start()

    def on_stage(self, msg: Any, **_: Any) -> None:
        """``lg_stage``: the coordinator's stage changed."""
        if self.run is not None:
            self.run.state.mirror.update(StageSnapshot.from_msg(msg.data))

    def on_reference(self, msg: Any, **_: Any) -> None:
        """``lg_reference``: the references are chosen; canary summaries carry their first divergence from now."""
        if self.run is not None:
            self.run.state.references = dict(msg.data["refs"])

    def finish(self) -> None:
        """``test_stop`` (or the next plan): close the record files and write the final process file."""
        part, self.run = self.run, None
        if part is not None:
            part.close()

    def wait_run(self) -> UserRun:
        """The plan arrives as a message before the first spawn; wait briefly rather than guess."""
        deadline = time.monotonic() + _PLAN_WAIT_S
        while self.run is None:
            if time.monotonic() > deadline:
                log.error("no run plan from the coordinator within %.0f s; stopping this user", _PLAN_WAIT_S)
                raise StopUser
            gevent.sleep(0.05)
        return self.run


def _stage_of(st: RunState) -> tuple[int | None, str | None]:
    """(level, phase) of the stage this process last heard of; (None, None) before the first or after the last."""
    snap = st.mirror.snapshot
    return (None, None) if snap is None else (snap.level, snap.phase)


def _report_inflight(environment: Environment, st: RunState, stats: BulkStats) -> None:
    """Tell the coordinator, every few tens of milliseconds, how many background users are busy here and whether
    a stage's background failed for good here; fold the background requests completed since into Locust's
    statistics."""
    assert environment.runner is not None
    while True:
        failed = st.failures.report()
        inflight = Inflight(st.worker, st.holding.slots, st.holding.held, failed)
        environment.runner.send_message("lg_inflight", inflight.to_msg())
        stats.fold()
        gevent.sleep(_REPORT_EVERY_S)


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
        "notices": st.engine.notices,  # the held-level gate's: the run's owner puts them in the manifest
    }
    path = st.run_dir / f"process-{st.worker}.json"
    try:
        write_file(path, orjson.dumps(info))
    except OSError as exc:  # a full disk: the records' own counts stay; the run's owner settles without this
        log.warning("could not write %s (%s); this process's record counts are not in the run folder", path, exc)


def attach_user_side(environment: Environment) -> UserSide:
    side = UserSide(environment)
    setattr(environment, _ATTR, side)
    return side


def user_side(environment: Environment) -> UserSide:
    """This process's user side, attached by the locustfile's ``init`` listener."""
    side = getattr(environment, _ATTR, None)
    assert isinstance(side, UserSide), "no user side: the locustfile's init listener attaches it"
    return side
