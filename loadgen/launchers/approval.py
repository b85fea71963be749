"""An engine someone else chose starts only once the person running loadgen approved its exact command.

Why: ``loadgen repro`` writes the engine a run started into the replay's ``[launcher]``, and the run folder came
from someone else: its launcher is a program of their choosing (kind ``command`` is a shell line; any kind may name
an ``executable``, ``args`` and ``env``). Such a launcher carries ``require_approval = true`` and starts only when
``$LOADGEN_APPROVE_ENGINE`` holds the SHA-256 of the command ``command_to_approve`` writes, which the refusal
shows: the approval is of that one command, given by whoever runs it, and no file can hold it for them (a
launcher changed by one character is another command, refused). The command is shown whole on one line,
environment first and ``{port}`` where a free port is picked at each start; one holding a character a terminal
would act on or hide cannot be shown as it runs, and is refused outright. The engine is talked to on this machine
only (``host`` a loopback address, or one that listens everywhere): the requests of a run, and any key it sends,
go to the engine approved, not to a host the scenario names beside the command (kind ``command`` does not show
its ``host``).

It decides and raises; it starts nothing and prints nothing (``loadgen.launchers.launcher`` asks it before
each start).
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Mapping

from loadgen.core.errors import UsageError, visible
from loadgen.core.scenario import APPROVE_ENV, PORT_PLACEHOLDER, LauncherSpec
from loadgen.core.web_guard import is_loopback
from loadgen.launchers.commands import launch_argv, launch_env, shown_command, url_host


def command_to_approve(spec: LauncherSpec, *, python: str = sys.executable) -> str:
    """The command ``spec`` starts, as the manifest records a started one (``LaunchPlan.shown``), with ``{port}``
    for a port picked at each start (SGLang's port-bound environment, set by loadgen itself, is left out)."""
    port = str(spec.port) if spec.port or spec.kind == "embedded" else PORT_PLACEHOLDER
    return shown_command(launch_env(spec, None), launch_argv(spec, port, python=python))


def approval_digest(command: str) -> str:
    """What approves ``command``: the hex SHA-256 of its UTF-8 text."""
    return hashlib.sha256(command.encode("utf-8")).hexdigest()


def showable(command: str) -> bool:
    """Whether ``command`` reads on a terminal as it runs: one line, no character a terminal acts on or hides."""
    return visible(command, keep="") == command


def check_approved(
    spec: LauncherSpec, *, python: str = sys.executable, environ: Mapping[str, str] = os.environ
) -> None:
    """Return where ``spec`` may start: it does not ask for approval, or ``$LOADGEN_APPROVE_ENGINE`` approves its
    command; else a ``UsageError`` that shows the command and the value that would approve it."""
    if not spec.require_approval:
        return
    if not is_loopback(url_host(spec.host).strip("[]")):  # the key a run sends goes where it talks to the engine
        raise UsageError(
            f"[launcher] require_approval: host {spec.host!r}: an engine someone else chose is talked to on this "
            "machine only (a loopback address, or 0.0.0.0 to listen everywhere): give the URL of an endpoint "
            "(--host) instead"
        )
    command = command_to_approve(spec, python=python)
    if not showable(command):
        raise UsageError(
            f"[launcher] require_approval: the engine's command holds a character a terminal would act on or hide "
            f"(shown escaped: {visible(command, keep='')}); it cannot be approved: give the URL of an endpoint "
            "(--host) instead"
        )
    digest = approval_digest(command)
    given = environ.get(APPROVE_ENV)
    if given == digest:
        return
    other = f" ({APPROVE_ENV} holds another value: it approves another command)" if given else ""
    raise UsageError(
        "[launcher] require_approval: this engine was chosen by whoever wrote the scenario (a reproducer's: the "
        f"run folder's author) and starts only with your approval of its exact command{other}:\n"
        f"{command}\n"
        f"Read it. To start it, run again with {APPROVE_ENV}={digest} (the SHA-256 of that line); to start "
        "nothing, give the URL of an endpoint (--host)"
    )
