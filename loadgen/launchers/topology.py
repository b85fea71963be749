"""Start a topology (prefill and decode engines, then the router in front), wait for all, stop all.

Why: a disaggregated endpoint is several processes that must come up in order (the router is told the
engines' URLs and waits for their health) and go down together; a fault in one must say which one it
was. Each process runs under ``loadgen.launchers.guard`` (it and its workers die with this process,
even one killed with SIGKILL) and logs to its own file in ``log_dir`` (``engine-prefill.log``,
``engine-decode.log`` or, mode ``reload``, ``engine.log``; ``router.log``), which ``move_logs`` renames
into the run folder once it exists. A server or router that exits early or never answers its health
URL is an ``EngineError`` that starts with its name and role and carries its command and log tail;
whatever had started is stopped first. After a run, ``exited`` names any process that died during it.
Engines start one after another (the guard's parent-death signal is tied to the thread that starts
it); an ExampleConnector topology without ``kv_path`` gets a fresh folder in ``log_dir`` per start. ``env``
goes into every engine's environment (not the router's), unrecorded: the step trace's folder.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from loadgen.core.errors import EngineArgsError, EngineError, UsageError
from loadgen.core.manifest import EngineFacts, ProcessFacts
from loadgen.core.runfiles import copy_file, write_file
from loadgen.core.scenario import LauncherSpec, Server, TopologyMode, TopologySpec
from loadgen.launchers.commands import LaunchPlan, kv_offload_facts
from loadgen.launchers.health import free_port, start_health_checked
from loadgen.launchers.process import RunningEngine, start_process
from loadgen.launchers.topology_commands import ServerPlan, decode_alias, plan_router, plan_servers, with_kv_peers

ROUTER_LOG = "router.log"
ROUTER_NAMES = {"embedded": "vllm-router", "vllm": "vllm-router", "sglang": "sglang-router"}


@dataclass
class StartedServer:
    spec: ServerPlan
    engine: RunningEngine

    @property
    def url(self) -> str:
        return self.engine.url


@dataclass
class RunningTopology:
    """The processes of one started topology; ``url`` is the router's, where traffic goes."""

    kind: str
    mode: TopologyMode
    servers: list[StartedServer] = field(default_factory=list)
    router: RunningEngine | None = None
    router_plan: LaunchPlan | None = None
    stop_timeout_s: float = 30.0

    @property
    def url(self) -> str:
        assert self.router is not None
        return self.router.url

    def server(self, role: str) -> StartedServer:
        """The server that serves ``role``'s leg (``decode``: the decode server, or the one of mode reload)."""
        return next(s for s in self.servers if s.spec.role in (role, "both"))

    def endpoint_servers(self) -> list[Server]:
        """What the run records in ``endpoint.servers``: every engine, its role and URL (metrics at /metrics)."""
        return [Server(name=s.spec.name, role=s.spec.role, base_url=s.url) for s in self.servers]

    def logs(self) -> list[RunningEngine]:
        return [*(s.engine for s in self.servers), *([self.router] if self.router else [])]

    def move_logs(self, folder: Path) -> None:
        """Every process's log into ``folder`` (the run folder), where each goes on writing."""
        for s in self.servers:
            s.engine.move_log(folder / s.spec.log_name)
        if self.router is not None:
            self.router.move_log(folder / ROUTER_LOG)

    def exited(self) -> list[str]:
        """A sentence for each process that is no longer running (it died during the run)."""
        out = []
        for s in self.servers:
            if (code := s.engine.process.poll()) is not None:
                out.append(
                    f"the {s.spec.name} server (role {s.spec.role}) exited with code {code} during the run; "
                    f"its log: {s.engine.log_path.name}"
                )
        if self.router is not None and (code := self.router.process.poll()) is not None:
            out.append(
                f"the router ({ROUTER_NAMES[self.kind]}) exited with code {code} during the run; its log: {ROUTER_LOG}"
            )
        return out

    def stop(self) -> None:
        """The router first (no new legs), then every engine; each its SIGTERM, then SIGKILL to its group."""
        if self.router is not None:
            self.router.stop(timeout_s=self.stop_timeout_s)
        for s in reversed(self.servers):
            s.engine.stop(timeout_s=self.stop_timeout_s)

    def describe(self) -> EngineFacts:
        """The manifest's ``engine``: the kind, the mode, each server's and the router's command and env."""
        servers: list[ProcessFacts] = [
            {
                "name": s.spec.name,
                "role": s.spec.role,
                "url": s.url,
                "command": s.spec.plan.shown(),
                "log": s.spec.log_name,
                "kv_offload": kv_offload_facts(s.spec.kv_offload),
            }
            for s in self.servers
        ]
        asked = next((s.spec.kv_offload for s in self.servers if s.spec.kv_offload is not None), None)
        if self.router is not None and self.router_plan is not None:
            servers.append(
                {
                    "name": "router",
                    "role": "router",
                    "url": self.url,
                    "command": self.router_plan.shown(),
                    "log": ROUTER_LOG,
                }
            )
        facts: EngineFacts = {"kind": self.kind, "topology": self.mode, "servers": servers, "starts": 1}
        facts["kv_offload"] = kv_offload_facts(asked)
        return facts

    def __enter__(self) -> RunningTopology:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def _start(plan: LaunchPlan, log_path: Path, ready_timeout_s: float, env: dict[str, str]) -> RunningEngine:
    """``env``: the tool's own additions to the engine's environment, never in the command a message shows."""
    if plan.ready_by == "line":
        return start_process(plan.argv, log_path=log_path, ready_timeout_s=ready_timeout_s, env={**plan.env, **env})
    return start_health_checked(plan, log_path=log_path, ready_timeout_s=ready_timeout_s, env=env)


def _kv_folder(topology: TopologySpec, log_dir: Path) -> TopologySpec:
    if topology.connector != "example" or topology.kv_path is not None:
        return topology
    folder = log_dir / "kv"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return topology.model_copy(update={"kv_path": str(folder)})


def start_topology(
    launcher: LauncherSpec | None,
    topology: TopologySpec,
    mode: TopologyMode,
    log_dir: Path,
    env: dict[str, str] | None = None,
) -> RunningTopology:
    """Start the engines of ``mode``, then the router in front of them; return once the router answers its
    health URL (it binds only once every engine answered its own). Raises ``EngineError`` naming the part."""
    spec = launcher or LauncherSpec()
    if spec.require_approval:  # approval is of one command (loadgen.launchers.approval); this starts several
        raise UsageError(
            f"[launcher] require_approval: a [topology] in mode {mode} starts several engines and a router, and "
            "an approval is of one command: give the URL of an endpoint (--host) instead"
        )
    log_dir.mkdir(parents=True, exist_ok=True)
    started = RunningTopology(spec.kind, mode, stop_timeout_s=spec.stop_timeout_s)
    try:
        plans = plan_servers(spec, _kv_folder(topology, log_dir), mode, lambda: free_port(spec.host))
        for plan in plans:
            plan = with_kv_peers(plan, spec.kind, [s.url for s in started.servers if s.spec.role == "prefill"])
            try:
                engine = _start(plan.plan, log_dir / plan.log_name, spec.ready_timeout_s, env or {})
            except EngineError as exc:
                raise EngineError(f"the {plan.name} server (role {plan.role}) did not start: {exc}") from None
            started.servers.append(StartedServer(plan, engine))
        prefill = [(s.url, s.spec.bootstrap_port) for s in started.servers if s.spec.role != "decode"]
        decode = [s.url for s in started.servers if s.spec.role == "decode"]
        if mode == "reload":
            decode = [decode_alias(started.servers[0].url)]
        router_plan = plan_router(spec.kind, topology, prefill, decode, free_port(), free_port())
        started.router_plan = router_plan
        try:
            started.router = _start(router_plan, log_dir / ROUTER_LOG, topology.router.ready_timeout_s, {})
        except EngineError as exc:
            where = ", ".join(f"{s.spec.name} {s.url}" for s in started.servers)
            raise EngineError(
                f"the router ({ROUTER_NAMES[spec.kind]}, in front of {where}) did not start: {exc}"
            ) from None
    except BaseException:
        started.stop()
        raise
    return started


def keep_failed_logs(exc: EngineError, log_dir: Path, folder: Path) -> EngineError:
    """A topology that failed to start leaves every log it wrote and the error in ``folder``
    (``engine-failed.txt``); the returned error names the kept logs, not the temporary folder."""
    if isinstance(exc, EngineArgsError):  # bad input, said in one line: its logs hold only a parser's usage
        return exc
    message = str(exc).replace(str(log_dir), str(folder))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for log in log_dir.glob("*.log"):
            if log.resolve() != (folder / log.name).resolve():
                copy_file(log, folder / log.name)
        write_file(folder / "engine-failed.txt", message + "\n")
    except OSError:
        return exc
    return EngineError(message)
