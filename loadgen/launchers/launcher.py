"""``Launcher``: start, stop and restart one engine configuration, any kind, with one interface.

Why: a cold-boot study restarts the engine between trials and a matrix starts one configuration
per cell; both should not care whether the engine is the embedded one, vLLM, SGLang, llama.cpp or
a user's shell command. Each start appends a header line and the engine's output to the log file
it is given (the run folder's ``engine.log``); a launcher with ``require_approval`` starts only once its command is
approved (``loadgen.launchers.approval``). ``env`` is added to every start's environment without
entering the command the manifest records (the step trace's folder: a temporary one, not a setting of
the engine). Raises ``EngineError`` (``UsageError`` for a start not approved); prints nothing.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from loadgen.core.errors import EngineError
from loadgen.core.manifest import EngineFacts, now_iso
from loadgen.core.runfiles import open_append
from loadgen.core.scenario import LauncherSpec
from loadgen.launchers.approval import check_approved
from loadgen.launchers.commands import LaunchPlan, kv_offload_facts, plan_launch
from loadgen.launchers.health import free_port, start_health_checked
from loadgen.launchers.process import RunningEngine, start_process


class Launcher:
    """One engine configuration; at most one process of it runs at a time."""

    def __init__(self, spec: LauncherSpec, env: dict[str, str] | None = None) -> None:
        self.spec = spec
        self.env = dict(env or {})
        self.engine: RunningEngine | None = None
        self.plan: LaunchPlan | None = None
        self.starts = 0
        self._log_path: Path | None = None

    @property
    def url(self) -> str:
        if self.engine is None:
            raise EngineError("the engine is not running (call start first)")
        return self.engine.url

    def start(self, log_path: Path) -> RunningEngine:
        """Start the engine and return once it serves; its output is appended to ``log_path``."""
        if self.engine is not None:
            raise EngineError(f"the engine is already running at {self.engine.url}; stop or restart it")
        spec = self.spec
        check_approved(spec)  # a launcher someone else chose (a reproducer's): only once its command is approved
        port = spec.port or (0 if spec.kind == "embedded" else free_port(spec.host))
        plan = plan_launch(spec, port)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open_append(log_path) as fh:
            fh.write(f"--- loadgen: start {self.starts + 1} at {now_iso()}: {plan.shown()}\n".encode())
        if plan.ready_by == "line":
            env = {**plan.env, **self.env}
            engine = start_process(plan.argv, log_path=log_path, ready_timeout_s=spec.ready_timeout_s, env=env)
        else:
            engine = start_health_checked(plan, log_path=log_path, ready_timeout_s=spec.ready_timeout_s, env=self.env)
        self.engine, self.plan, self._log_path = engine, plan, log_path
        self.starts += 1
        return engine

    def stop(self) -> int | None:
        """Stop the running engine (SIGTERM, then SIGKILL); its exit code, or None when none ran."""
        if self.engine is None:
            return None
        engine, self.engine = self.engine, None
        return engine.stop(timeout_s=self.spec.stop_timeout_s)

    def restart(self, log_path: Path | None = None) -> RunningEngine:
        """Stop the engine and start a fresh process (a cold boot), logging to ``log_path`` or the last log."""
        target = log_path or self._log_path
        if target is None:
            raise EngineError("restart before any start: give a log path")
        self.stop()
        return self.start(target)

    def describe(self) -> EngineFacts:
        """What the manifest records about the engine: kind, the last command with its environment, starts."""
        return {
            "kind": self.spec.kind,
            "model": self.spec.model,
            "command": self.plan.shown() if self.plan else None,
            "env": dict(self.plan.env) if self.plan else dict(self.spec.env),
            "starts": self.starts,
            "kv_offload": kv_offload_facts(self.spec.kv_offload),
        }

    def __enter__(self) -> Launcher:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
