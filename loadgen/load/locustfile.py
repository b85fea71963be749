"""The file Locust loads (``-f``): the wiring between Locust's events and messages and the run's two sides.

Run it through ``loadgen run`` (headless, ``--processes N`` or ``--ui``) or as ``locust -f`` on this
file (also ``--master`` / ``--worker``). Importing it imports Locust and so gevent's monkey-patching:
nothing in ``reports`` may import it. Locust imports it by path, as the module ``locustfile``, and
takes the user classes and the shape it finds in it (``CanaryUser``, ``BackgroundUser``, ``LevelShape``).

Two sides, one code path: the coordinator side (master, or the local process: ``coordinator.py``) prepares the
run folder, owns the stage tracker and records the run's facts; the user side (workers, or the local process:
``user_side.py``) runs the users (``users.py``, ``background_user.py``) and writes its own
``canaries-<worker>.jsonl``. They talk through Locust's messages, which a local runner loops back in-process.
Each side is one object per process, attached to Locust's ``Environment`` at ``init``;
this file keeps no state of its own.
"""

from __future__ import annotations

from typing import Any

from locust import events
from locust.env import Environment
from locust.event import EventHook
from locust.runners import MasterRunner, WorkerRunner

from loadgen.core.options import web_credentials
from loadgen.core.stacks import dump_stacks_on_usr1
from loadgen.load.background_user import BackgroundUser
from loadgen.load.coordinator import attach_coordinator, coordinator_side
from loadgen.load.interrupt import interrupt_main_safely
from loadgen.load.options import Launch, add_arguments, summary_only
from loadgen.load.shape import LevelShape
from loadgen.load.user_side import attach_user_side, user_side
from loadgen.load.users import CanaryUser
from loadgen.load.webui import install_login, install_tab, protect

__all__ = ["BackgroundUser", "CanaryUser", "LevelShape"]  # what Locust takes from this module

dump_stacks_on_usr1()  # into this process's log, on request (loadgen.core.stacks)
interrupt_main_safely()  # Ctrl-C as a KeyboardInterrupt in Locust's main greenlet only (loadgen.load.interrupt)


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    add_arguments(parser)


@events.init.add_listener
def _init(environment: Environment, **_: Any) -> None:
    launch = Launch.of(environment.parsed_options)
    summary_only(environment.parsed_options)
    environment.events.canary_record = EventHook()  # type: ignore[attr-defined]
    runner = environment.runner
    if runner is None:
        return
    if not isinstance(runner, WorkerRunner):
        coordinating = attach_coordinator(environment, launch)
        runner.register_message("lg_inflight", coordinating.on_inflight)
        runner.register_message("lg_done", coordinating.on_done)
        if (web_ui := environment.web_ui) is not None:
            install_tab(web_ui, table=coordinating.live_rows, report=coordinating.latest_report)
            bind_host = str(launch.options.get("web_host") or "")
            protect(web_ui, bind_host=bind_host, check_start=coordinating.start_refusal)
            if web_ui.web_login:
                user, password = web_credentials()
                install_login(web_ui, user=user, password=password)
    if not isinstance(runner, MasterRunner):
        users = attach_user_side(environment)
        runner.register_message("lg_plan", users.on_plan)
        runner.register_message("lg_stage", users.on_stage)
        runner.register_message("lg_reference", users.on_reference)


@events.test_stop.add_listener
def _stop(environment: Environment, **_: Any) -> None:
    if not isinstance(environment.runner, MasterRunner):
        user_side(environment).finish()
    if not isinstance(environment.runner, WorkerRunner):
        coordinator_side(environment).finish()


@events.quitting.add_listener
def _quitting(environment: Environment, **_: Any) -> None:
    runner = environment.runner
    if runner is None or isinstance(runner, WorkerRunner) or runner.exceptions:
        return  # a user that raised: Locust's own exit code says so
    if (code := coordinator_side(environment).exit_code()) is not None:
        environment.process_exit_code = code
