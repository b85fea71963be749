"""The command lines of a topology: each server's and the router's, pure functions, no processes.

Why: a prefill/decode pair is two engine command lines that must agree (the connector, the ports each
side listens on) and a router that must be told both; a wrong flag costs minutes of model loading on a
GPU before it shows. So, as ``loadgen.launchers.commands`` does for one engine, the commands are built
here and pinned by tests without vLLM, SGLang or a GPU. Flags, as the servers document them:

- embedded: each server is ``loadgen.engine`` with ``--role prefill``, ``--role decode`` (mode ``pd``)
  or ``--role both`` (mode ``reload``); it speaks vLLM NixlConnector's ``kv_transfer_params``. A server
  fetches KV only from the prefill servers its ``--kv-peers`` names: the decode server is given the prefill
  server's address once that one has started (``with_kv_peers``: it binds a free port and says which), the
  one engine of mode ``reload`` ``--kv-peers self``.
- vLLM: ``--kv-transfer-config`` with ``NixlConnector`` (``kv_role`` ``kv_both``, ``kv_buffer_device``
  ``cuda``; env ``VLLM_NIXL_SIDE_CHANNEL_PORT`` distinct per instance), ``NixlPushConnector`` (connector
  ``nixl-push``: the same, but the prefiller WRITEs the blocks the decoder registered, where ``NixlConnector``
  has the decoder READ them; UCX's ``cuda_ipc`` serves a WRITE at peer-copy speed and a READ over TCP on a
  GPU without NVLink peers, vLLM issue #52607) or ``ExampleConnector`` (its
  ``shared_storage_path`` one folder for both); ``connector_extra`` goes into
  ``kv_connector_extra_config`` (a foreign attention backend over NIXL needs
  ``enforce_handshake_compat = false``).
- SGLang: ``--disaggregation-mode prefill|decode``, the prefill server's
  ``--disaggregation-bootstrap-port``, ``--disaggregation-transfer-backend nixl|mooncake``.
- vllm-router: ``python -m vllm_router.launch_router --vllm-pd-disaggregation --prefill URL --decode URL
  --host H --port N --prometheus-port M`` (a second router on one machine needs another prometheus port,
  so a free one is always given); it knows a worker by its URL, so in mode ``reload`` the one engine is
  given as ``http://127.0.0.1:P`` to prefill and as ``http://localhost:P`` to decode.
- sglang-router: ``python -m sglang_router.launch_router --pd-disaggregation --prefill URL BOOTSTRAP_PORT
  --decode URL --host H --port N --prometheus-port M``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from loadgen.core.errors import ScenarioError
from loadgen.core.scenario import LauncherSpec, Side, TopologyMode, TopologySpec
from loadgen.core.scenario.engines import KvOffload
from loadgen.core.scenario.schema import ServerRole
from loadgen.launchers.commands import LaunchPlan, plan_launch

ROUTER_HOST = "127.0.0.1"
ROUTER_MODULES = {"embedded": "vllm_router.launch_router", "vllm": "vllm_router.launch_router"}
ROUTER_MODULES["sglang"] = "sglang_router.launch_router"
# the vLLM connector class of each NIXL connector setting (each instance then needs its own side-channel port)
VLLM_NIXL = {"nixl": "NixlConnector", "nixl-push": "NixlPushConnector"}
PORTED = ("vllm", "sglang")  # kinds whose servers are given a port (the embedded engine binds one and says it)


@dataclass(frozen=True)
class ServerPlan:
    """One engine of the topology: its name (``prefill``, ``decode``; ``engine`` in mode ``reload``), its role,
    how it starts, where its log goes in the run folder, and (SGLang) the port its prefill bootstrap listens on."""

    name: str
    role: ServerRole
    plan: LaunchPlan
    log_name: str
    bootstrap_port: int | None = None
    kv_offload: KvOffload | None = None  # its CPU KV tier, as its command line asks it


def side_launcher(launcher: LauncherSpec, side: Side) -> LauncherSpec:
    """``[launcher]`` with one side's args appended, env merged over and ``kv_offload`` in place of its own."""
    update: dict[str, object] = {"args": [*launcher.args, *side.args], "env": {**launcher.env, **side.env}}
    update["kv_offload"] = side.kv_offload or launcher.kv_offload
    return launcher.model_copy(update=update)


def _vllm_kv_config(topology: TopologySpec) -> str:
    extra: dict[str, object] = dict(topology.connector_extra)
    if topology.connector == "example":
        config: dict[str, object] = {"kv_connector": "ExampleConnector", "kv_role": "kv_both"}
        extra = {"shared_storage_path": topology.kv_path, **extra}
    else:
        config = {"kv_connector": VLLM_NIXL[topology.connector], "kv_role": "kv_both", "kv_buffer_device": "cuda"}
    if extra:
        config["kv_connector_extra_config"] = extra
    return json.dumps(config, separators=(",", ":"))


def _pd_flags(kind: str, role: ServerRole, topology: TopologySpec, bootstrap: int | None) -> list[str]:
    if kind == "embedded":
        return ["--role", role, *(["--kv-peers", "self"] if role == "both" else [])]
    if kind == "vllm":
        return ["--kv-transfer-config", _vllm_kv_config(topology)]
    flags = ["--disaggregation-mode", role, "--disaggregation-transfer-backend", topology.connector]
    return flags + (["--disaggregation-bootstrap-port", str(bootstrap)] if bootstrap is not None else [])


def plan_servers(
    launcher: LauncherSpec,
    topology: TopologySpec,
    mode: TopologyMode,
    port: Callable[[], int],
    *,
    python: str = sys.executable,
) -> list[ServerPlan]:
    """The engines of ``mode`` (``pd``: prefill and decode; ``reload``: one serving both); ``port`` gives a free
    port each call (vLLM and SGLang: the HTTP port, NIXL's side channel, SGLang's bootstrap)."""
    if mode == "colocated":
        raise ValueError("plan_servers: a colocated endpoint is one engine (loadgen.launchers.commands.plan_launch)")
    if topology.connector == "example" and topology.kv_path is None:
        raise ValueError("plan_servers: ExampleConnector needs topology.kv_path (the launcher picks one per start)")
    kind = launcher.kind
    sides: list[tuple[str, ServerRole, Side]] = (
        [("prefill", "prefill", topology.prefill), ("decode", "decode", topology.decode)]
        if mode == "pd"
        else [("engine", "both", topology.decode)]
    )
    plans: list[ServerPlan] = []
    for name, role, side in sides:
        spec = side_launcher(launcher, side)
        plan = plan_launch(spec, port() if kind in PORTED else 0, python=python)
        bootstrap = None
        if kind == "sglang" and role == "prefill":
            bootstrap = topology.bootstrap_port or port()
        env = dict(plan.env)
        if kind == "vllm" and topology.connector in VLLM_NIXL and "VLLM_NIXL_SIDE_CHANNEL_PORT" not in side.env:
            env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(port())  # distinct per instance, or the second fails to bind
        plan = replace(plan, argv=[*plan.argv, *_pd_flags(kind, role, topology, bootstrap)], env=env)
        log = "engine.log" if mode == "reload" else f"engine-{name}.log"
        plans.append(ServerPlan(name, role, plan, log, bootstrap, spec.kv_offload))
    return plans


def with_kv_peers(plan: ServerPlan, kind: str, prefill_urls: list[str]) -> ServerPlan:
    """An embedded decode server's plan with ``--kv-peers`` naming the started prefill servers as their answers
    name themselves (a wildcard host advertises 127.0.0.1, as loadgen.engine.pd.advertised_host says); any
    other plan as it is."""
    if kind != "embedded" or plan.role != "decode" or not prefill_urls:
        return plan
    peers = []
    for url in prefill_urls:
        parts = urlsplit(url)
        host = "127.0.0.1" if parts.hostname in (None, "", "0.0.0.0", "::") else parts.hostname
        peers.append(f"{host}:{parts.port}")
    argv = [*plan.plan.argv, "--kv-peers", ",".join(peers)]
    return replace(plan, plan=replace(plan.plan, argv=argv))


def decode_alias(url: str) -> str:
    """The same server under another name, for a router that knows workers by URL (mode ``reload``)."""
    parts = urlsplit(url)
    if parts.hostname != "127.0.0.1":
        raise ScenarioError(
            f"topology mode 'reload' needs its engine on 127.0.0.1 (the router is given it twice, as 127.0.0.1 and "
            f"as localhost), not {parts.hostname}: set launcher.host to 127.0.0.1"
        )
    return f"{parts.scheme}://localhost:{parts.port}"


def plan_router(
    kind: str,
    topology: TopologySpec,
    prefill: list[tuple[str, int | None]],
    decode: list[str],
    port: int,
    prometheus_port: int,
    *,
    python: str = sys.executable,
) -> LaunchPlan:
    """The router in PD mode in front of ``prefill`` ((URL, SGLang bootstrap port) pairs) and ``decode`` URLs."""
    router = topology.router
    module = ROUTER_MODULES[kind]
    argv = [router.executable or python, "-m", module]
    if kind == "sglang":
        argv.append("--pd-disaggregation")
        for url, bootstrap in prefill:
            argv += ["--prefill", url, *([str(bootstrap)] if bootstrap is not None else [])]
    else:
        argv.append("--vllm-pd-disaggregation")
        for url, _ in prefill:
            argv += ["--prefill", url]
    for url in decode:
        argv += ["--decode", url]
    argv += ["--host", ROUTER_HOST, "--port", str(port), "--prometheus-port", str(prometheus_port)]
    if kind != "sglang":
        argv += ["--worker-startup-check-interval", "1"]  # the engines are up already: no need to wait 30 s
    base = f"http://{ROUTER_HOST}:{port}"
    return LaunchPlan([*argv, *router.args], dict(router.env), "health", base, base + "/health")
