"""The command line, environment and URLs that start each kind of engine: pure functions, no processes.

Why: each server spells its options differently, and a wrong flag costs minutes of model loading
before it shows. Building the command is kept apart from running it, so tests pin every kind's
command without vLLM, SGLang or llama.cpp installed. Flags, as the servers document them:

- vLLM: ``vllm serve MODEL --host H --port P``; ``--no-enable-prefix-caching`` turns prefix caching
  off; env ``VLLM_BATCH_INVARIANT=1`` turns batch-invariant kernels on; env
  ``VLLM_SERVER_DEV_MODE=1`` (set by default here) exposes ``POST /reset_prefix_cache``.
- SGLang: ``python -m sglang.launch_server --model-path M --host H --port P``;
  ``--enable-deterministic-inference``, ``--disable-radix-cache``; ``--enable-metrics`` (added by
  default) serves ``/metrics``. SGLang 0.5.15 refuses to start when ``P + 10000`` (its gRPC port, bound
  only with ``SGLANG_ENABLE_GRPC``) is above 65535, as a free port above 55535 makes it: env
  ``SGLANG_GRPC_PORT`` is then set to ``P - 10000`` (``sglang_env``).
- llama.cpp: ``llama-server -m MODEL --host H --port P``; ``-np N`` parallel slots; ``--metrics``
  (added by default) serves ``/metrics``. Its ``/health`` answers 503 while the model loads.
- embedded: ``python -P -m loadgen.engine --host H --port P`` (``--batch-invariant``,
  ``--no-enable-prefix-caching``); it prints ``READY <url>`` once serving.
- ``kv_offload`` (a CPU KV tier, docs/design.md "Cache actions"): vLLM 0.26 and the embedded engine take
  ``--kv-offloading-size GIB`` and ``--kv-offloading-backend native|lmcache``; the embedded engine also
  ``--kv-offloading-dtype bf16|fp8``. Other kinds are refused by the scenario (``kv_offload_problem``).
- command: ``/bin/sh -c COMMAND`` with ``{port}`` replaced, the launcher's ``args`` appended.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from typing import Literal

from loadgen.core.manifest import KvOffloadFacts
from loadgen.core.scenario import PORT_PLACEHOLDER, LauncherSpec
from loadgen.core.scenario.engines import KvOffload
from loadgen.core.web_guard import is_loopback

ReadyBy = Literal["line", "health"]  # "line": the process prints READY <url>; "health": poll health_url for 200

DEFAULT_ENV: dict[str, dict[str, str]] = {"vllm": {"VLLM_SERVER_DEV_MODE": "1"}}
DEFAULT_FLAGS: dict[str, tuple[str, ...]] = {"sglang": ("--enable-metrics",), "llamacpp": ("--metrics",)}


@dataclass(frozen=True)
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]  # added to the launching process's environment
    ready_by: ReadyBy
    base_url: str | None  # None when the process announces it (ready_by "line")
    health_url: str | None

    def shown(self) -> str:
        """The command as a user would type it, environment first (for manifests and error messages)."""
        return shown_command(self.env, self.argv)


def bound_host(spec: LauncherSpec, extra_args: list[str] | tuple[str, ...] = ()) -> str:
    """The address the engine listens on: the launcher's ``host``, unless its args (or ``extra_args``, appended
    after them) give ``--host``, whose last value the engine's own parser keeps. A command's script is not read."""
    host = spec.host
    args = [*spec.args, *extra_args]
    for i, a in enumerate(args):
        if a == "--host" and i + 1 < len(args):
            host = args[i + 1]
        elif a.startswith("--host="):
            host = a.split("=", 1)[1]
    return host


def exposed_host(spec: LauncherSpec, extra_args: list[str] | tuple[str, ...] = ()) -> str | None:
    """The address, where the engine would answer anyone who reaches this machine (not a loopback one)."""
    host = bound_host(spec, extra_args)
    return None if is_loopback(host) else host


def shown_command(env: dict[str, str], argv: list[str]) -> str:
    """``argv`` as a user would type it, ``env`` first: one line for sh, each word quoted where it needs it."""
    assigned = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    return (assigned + " " if assigned else "") + shlex.join(argv)


def url_host(host: str) -> str:
    """``host`` as the host part of the URL loadgen talks to the engine at."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"  # listening everywhere: talk to it locally
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _with_defaults(kind: str, args: list[str]) -> list[str]:
    return [*args, *(f for f in DEFAULT_FLAGS.get(kind, ()) if f not in args)]


def sglang_env(port: int) -> dict[str, str]:
    """What SGLang on ``port`` needs in its environment: a gRPC port in range where its default, ``port + 10000``,
    is not (a cold-boot matrix cell on port 59279 failed with "SGLANG_GRPC_PORT (69279) must be between 1 and
    65535"); nothing otherwise. A scenario's own ``SGLANG_GRPC_PORT`` wins."""
    return {"SGLANG_GRPC_PORT": str(port - 10000)} if port + 10000 > 65535 else {}


def plan_launch(spec: LauncherSpec, port: int, *, python: str = sys.executable) -> LaunchPlan:
    """The plan for starting ``spec`` on ``port`` (0 only for the embedded engine, which picks and announces one)."""
    if port == 0 and spec.kind != "embedded":
        raise ValueError(f"plan_launch: kind {spec.kind!r} needs a concrete port, got 0")
    env = launch_env(spec, port)
    argv = launch_argv(spec, str(port), python=python)
    if spec.kind == "embedded":
        return LaunchPlan(argv, env, "line", None, None)
    base_url = f"http://{url_host(spec.host)}:{port}"
    return LaunchPlan(argv, env, "health", base_url, base_url + spec.health_path)


def launch_env(spec: LauncherSpec, port: int | None) -> dict[str, str]:
    """What ``spec`` adds to the engine's environment: the kind's defaults, SGLang's port-bound one (none while the
    port is not known), then its own ``env``."""
    bound = sglang_env(port) if spec.kind == "sglang" and port is not None else {}
    return {**DEFAULT_ENV.get(spec.kind, {}), **bound, **spec.env}


def kv_offload_flags(kind: str, offload: KvOffload | None) -> list[str]:
    """The engine flags of ``offload`` for ``kind`` (embedded or vllm: the scenario refused the rest); [] for none."""
    if offload is None:
        return []
    flags = [
        "--kv-offloading-size",
        repr(offload.size_gib).removesuffix(".0"),
        "--kv-offloading-backend",
        offload.backend,
    ]
    if kind == "embedded" and offload.dtype is not None:
        flags += ["--kv-offloading-dtype", offload.dtype]
    return flags


def kv_offload_facts(offload: KvOffload | None) -> KvOffloadFacts | None:
    """What the manifest records of ``offload`` (``engine.kv_offload``): the setting as asked."""
    if offload is None:
        return None
    return {"size_gib": offload.size_gib, "backend": offload.backend, "dtype": offload.dtype}


def launch_argv(spec: LauncherSpec, port: str, *, python: str = sys.executable) -> list[str]:
    """The command line that starts ``spec`` with ``port`` written as given: a number, or ``{port}`` where the
    command is shown before a port is picked (``loadgen.launchers.approval``)."""
    where = ["--host", spec.host, "--port", port]
    offload = kv_offload_flags(spec.kind, spec.kv_offload)
    if spec.kind == "embedded":
        # -P: the caller's working directory is not put on sys.path (a stray local module cannot shadow a dependency)
        return [python, "-P", "-m", "loadgen.engine", *where, *spec.args, *offload]
    assert spec.kind == "command" or spec.model is not None  # the spec's validator guarantees it
    if spec.kind == "vllm":
        return [spec.executable or "vllm", "serve", str(spec.model), *where, *spec.args, *offload]
    if spec.kind == "sglang":
        return [
            spec.executable or python,
            "-m",
            "sglang.launch_server",
            "--model-path",
            str(spec.model),
            *where,
            *_with_defaults("sglang", spec.args),
        ]
    if spec.kind == "llamacpp":
        return [
            spec.executable or "llama-server",
            "-m",
            str(spec.model),
            *where,
            *_with_defaults("llamacpp", spec.args),
        ]
    assert spec.command is not None
    line = spec.command.replace(PORT_PLACEHOLDER, port)
    return ["/bin/sh", "-c", line + (" " + shlex.join(spec.args) if spec.args else "")]
