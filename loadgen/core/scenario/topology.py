"""``[topology]``: the endpoint as a prefill engine, a decode engine and a router, started by the tool.

Why: disaggregated serving is several processes, each with its own kernel settings, and the study is
which of them changes the canary's answer (docs/studies.md, "Prefill/decode topologies"). A scenario
says once how every engine starts (``[launcher]``: kind, model, the args and env they share) and here
what each side adds (``prefill``, ``decode``: args appended, env merged over) and how the router runs.
The launcher (``loadgen.launchers.topology``) fills ``endpoint.servers`` with what it started. Modes:

- ``colocated``: one engine (``[launcher]`` alone), the reference;
- ``pd``: a prefill engine, a decode engine and the router in PD mode in front of them;
- ``reload``: one engine that serves both legs, behind the router as its own prefiller: its decode leg
  loads the KV its own prefill leg handed over (the decoder's own reload).

Pydantic only; starts nothing. Checks that need ``[launcher]`` are the scenario's (``check_topology``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from loadgen.core.scenario.engines import (
    Connector,
    ConnectorExtra,
    EngineArgs,
    EnvVars,
    LauncherSpec,
    Side,
    TopologyMode,
    kv_offload_problem,
)

SIDE_KINDS = ("embedded", "vllm", "sglang")  # engine kinds with a prefill/decode mode and a router
# which connectors each kind's PD mode speaks (the embedded engine: NixlConnector's kv_transfer_params)
CONNECTORS: dict[str, tuple[Connector, ...]] = {
    "embedded": ("nixl",),
    "vllm": ("nixl", "nixl-push", "example"),
    "sglang": ("nixl", "mooncake"),
}
# the CLI option each kind's engines take a whole KV-transfer setting by: the launcher writes it
KV_OPTIONS: dict[str, str] = {"vllm": "--kv-transfer-config", "sglang": "--disaggregation-mode"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class RouterSpec(_Strict):
    """The router in front: vllm-router for the embedded engine and vLLM, sglang-router for SGLang."""

    executable: str | None = Field(default=None, min_length=1)  # the Python with the router package; default this one
    args: EngineArgs = []  # appended to the command line the launcher builds
    env: EnvVars = {}
    ready_timeout_s: float = Field(default=120.0, gt=0)


class TopologySpec(_Strict):
    mode: TopologyMode = "pd"
    prefill: Side = Side()
    decode: Side = Side()  # in mode "reload", the one engine's settings
    router: RouterSpec = RouterSpec()
    connector: Connector = "nixl"  # vLLM: NixlConnector, NixlPushConnector or ExampleConnector; SGLang: its backend
    # ExampleConnector: the folder both engines store and load KV in; default a fresh temporary folder per start
    kv_path: str | None = Field(default=None, min_length=1)
    # merged into vLLM's kv_connector_extra_config (NIXL across kernels: {enforce_handshake_compat = false})
    connector_extra: ConnectorExtra = {}
    bootstrap_port: Annotated[int, Field(ge=0, le=65535)] = 0  # SGLang's prefill bootstrap port; 0: a free one


def check_topology(topology: TopologySpec, launcher: LauncherSpec | None, mode: TopologyMode) -> str | None:
    """Why ``topology`` cannot run in ``mode`` with ``launcher`` (``None``: the embedded engine), or None."""
    spec = launcher or LauncherSpec()
    if mode == "colocated":
        return None
    if spec.kind not in SIDE_KINDS:
        return f"needs [launcher] kind embedded, vllm or sglang (their engines have PD roles), not {spec.kind!r}"
    if spec.port != 0:
        return f"starts several servers, each on a free port: leave launcher.port at 0 (it is {spec.port})"
    if mode == "reload" and spec.kind == "sglang":
        return "mode 'reload' needs one engine that serves both legs (embedded or vllm); SGLang's PD mode has none"
    if topology.connector not in CONNECTORS[spec.kind]:
        allowed = ", ".join(CONNECTORS[spec.kind])
        return f"connector {topology.connector!r} is not one {spec.kind} speaks here (one of: {allowed})"
    if topology.kv_path is not None and topology.connector != "example":
        return "kv_path is ExampleConnector's shared folder: set connector = 'example' or drop kv_path"
    option = KV_OPTIONS.get(spec.kind)
    sides = {"launcher.args": spec.args, "topology.prefill.args": topology.prefill.args}
    sides["topology.decode.args"] = topology.decode.args
    for where, args in sides.items():
        if option is not None and option in args:
            return f"{where} has {option}: the launcher writes it from 'connector' (and 'connector_extra')"
    for name, side in (("prefill", topology.prefill), ("decode", topology.decode)):
        where = f"topology.{name}.kv_offload" if side.kv_offload else "launcher.kv_offload"
        if why := kv_offload_problem(spec.kind, side.kv_offload or spec.kv_offload, [*spec.args, *side.args], where):
            return why
    return None
