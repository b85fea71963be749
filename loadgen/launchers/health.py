"""Start an engine that announces nothing and wait until its health URL answers 200.

Why: vLLM, SGLang and llama.cpp print no machine-readable "ready" line; the dependable signal is
``GET /health`` returning 200 (llama.cpp answers 503 while it loads the model; the others refuse
connections until they serve). The process runs under ``loadgen.launchers.guard`` with its own
process group, so stopping it also stops the workers it spawned, and so does the death of this
process; its stdout and stderr go straight to a log file. An engine that exits
or never becomes healthy is an ``EngineError`` with the command, the exit code, the last health
answer and the log tail. Blocking stdlib HTTP, no proxies; prints nothing.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from loadgen.core.errors import EngineError
from loadgen.core.runfiles import open_append
from loadgen.launchers.commands import LaunchPlan
from loadgen.launchers.guard import spawn
from loadgen.launchers.process import RunningEngine, log_tail, refused_args
from loadgen.launchers.step_trace import trace_folder

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the engine binds it a moment later; another process could take it first)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host if host not in ("", "0.0.0.0") else "127.0.0.1", 0))
        return int(s.getsockname()[1])


def health_status(url: str, *, timeout_s: float = 2.0) -> str:
    """One GET: ``"HTTP 200"``, ``"HTTP 503"``..., or why no answer came (``"no answer (connection refused)"``)."""
    try:
        with _OPENER.open(urllib.request.Request(url, method="GET"), timeout=timeout_s) as resp:
            return f"HTTP {resp.status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except urllib.error.URLError as exc:
        return f"no answer ({exc.reason})"
    except (TimeoutError, OSError) as exc:
        return f"no answer ({type(exc).__name__}: {exc})"


def start_health_checked(
    plan: LaunchPlan,
    *,
    log_path: Path,
    ready_timeout_s: float,
    poll_s: float = 0.5,
    env: Mapping[str, str] | None = None,
) -> RunningEngine:
    """Start ``plan`` and return once ``plan.health_url`` answers 200; the engine is stopped on failure. ``env``
    joins the engine's environment but not the command a message shows (the tool's own step-trace folder, a
    temporary one: loadgen/launchers/step_trace.py)."""
    extra = dict(env or {})
    assert plan.health_url is not None and plan.base_url is not None
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open_append(log_path) as log_fh:
        try:
            proc = spawn(  # under a guard, leading its own group: it and its workers die with this process
                plan.argv,
                stdin=subprocess.DEVNULL,
                stdout=log_fh,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **plan.env, **extra},
            )
        except OSError as exc:  # the program is not installed, or not executable
            raise EngineError(f"cannot start the engine ({exc.strerror or exc})\ncommand: {plan.shown()}") from None
    engine = RunningEngine(
        plan.base_url, proc, plan.argv, log_path, group=True, trace_dir=trace_folder({**plan.env, **extra})
    )
    deadline = time.monotonic() + ready_timeout_s
    last = "no answer yet"
    while True:
        if proc.poll() is not None:
            engine.stop()  # its workers may still be running
            # an engine or a router (a topology names which): its parser's line, not its whole usage
            said = f"exited with code {proc.returncode}, refusing its arguments"
            if (refused := refused_args(proc.returncode, log_path, plan.shown(), said)) is not None:
                raise refused
            why = f"exited with code {proc.returncode} before {plan.health_url} answered 200"
            break
        last = health_status(plan.health_url)
        if last == "HTTP 200":
            return engine
        if time.monotonic() >= deadline:
            code = engine.stop(timeout_s=5.0)
            why = f"did not answer 200 on {plan.health_url} within {ready_timeout_s:g} s (stopped; exit code {code})"
            break
        time.sleep(poll_s)
    raise EngineError(
        f"engine {why}; last health answer: {last}\ncommand: {plan.shown()}\n"
        f"log tail ({log_path}):\n{log_tail(log_path)}"
    )
