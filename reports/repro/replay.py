"""The replay of a reproducer: the scenario ``replay.toml`` holds and ``replay.sh``, which runs it.

So that an engine's developers can watch the record's failure again with ``loadgen run``: the same
canary among background traffic drawn from the run's own ``[background]`` settings, at the record's
level, with the run's warm-up and baseline, against the endpoint the person replaying names, or the engine
the run started. Where the manifest lacks the canary's scenario entry, the entry is rebuilt from the
recorded request body (``canary_from_body``).

The run folder may come from anyone (docs/faults-and-secrets.md, "A reproducer from someone else"), so the
replay takes nothing from it that decides where requests or keys go, or what runs: no base URL, no server
addresses, no key variable (``REPLAY_ENDPOINT`` lists what of ``[endpoint]`` is kept), and the engine the
run started comes back as a ``[launcher]`` with ``require_approval = true``, which starts only once the person
replaying approved its exact command (``loadgen.launchers.approval``).

Pure: the run and the record in, a scenario dict, notes and the script's text out. Never writes an
API key or a key variable's name; validating the scenario is the CLI's job, and writing it as TOML
``reports.repro.toml_writer``'s.
"""

from __future__ import annotations

import shlex
import sys
from typing import Any

from collectors.read.runfolder import RunData
from loadgen.core.scenario import APPROVE_ENV
from reports.render.shtext import comment_value
from reports.repro.choice import Choice

EMBEDDED_PREFIX = ["-P", "-m", "loadgen.engine", "--host", "127.0.0.1", "--port", "0"]
# what of the run's [endpoint] a replay keeps: how to talk to an endpoint, never where it is or whose key it takes
REPLAY_ENDPOINT = (
    "kind",
    "model",
    "connect_timeout_s",
    "read_timeout_s",
    "request_timeout_s",
    "max_response_bytes",
    "cache_reset_path",
    "metrics_interval_s",
)


def replay_scenario(run: RunData, choice: Choice, record: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A scenario that sends this canary again with background shaped like the run's, at this record's
    level; and plain sentences on what it cannot carry over."""
    m = run.manifest
    sc = m.scenario if isinstance(m.scenario, dict) else {}
    notes: list[str] = []
    recorded = dict_or_empty(sc.get("endpoint"))
    endpoint = {k: recorded[k] for k in REPLAY_ENDPOINT if recorded.get(k) is not None}
    if not endpoint:
        endpoint = {k: v for k, v in (("kind", m.endpoint.kind), ("model", m.endpoint.model)) if v is not None}
    if recorded.get("api_key_env") or m.endpoint.api_key_env:
        notes.append(
            "The run read an API key from a variable its scenario named; the replay reads none unless you name "
            "yours on its command line (--api-key-env NAME), and sends it only to the URL you give, or to the "
            "engine it starts."
        )
    if recorded.get("servers"):
        notes.append(
            "The run also read the /metrics of the servers behind its endpoint (endpoint.servers); the replay "
            "does not (their addresses are the run's): add endpoint.servers tables naming yours to replay.toml."
        )
    started = m.engine is not None  # loadgen started the engine: the replay starts it the same way, once approved
    canary = next(
        (dict(c) for c in sc.get("canaries") or [] if isinstance(c, dict) and c.get("id") == choice.canary_id), None
    )
    if canary is None:
        canary = canary_from_body(choice.canary_id, record)
        notes.append(
            "The run's manifest does not hold this canary's scenario entry: it was rebuilt from the request body."
        )
    if "seed" in canary and canary["seed"] is None:
        notes.append("The canary was sent without a seed; a scenario cannot say so, so the replay sends seed 0.")
    canary = {k: v for k, v in canary.items() if v is not None}
    sweep_in = dict_or_empty(sc.get("sweep"))
    level = int(record.get("level") or 0)
    burst = bool(record.get("burst"))
    sweep: dict[str, Any] = {
        k: sweep_in[k]
        for k in (
            "canaries_per_level",
            "warmup",
            "baseline",
            "canary_pace_s",
            "spawn_rate",
            "settle_timeout_s",
            "burst_cache",
            "burst_send",
        )
        if k in sweep_in and sweep_in[k] is not None
    }
    sweep["levels"] = [0] if burst or record.get("phase") != "sweep" else [level]
    if burst and level:
        sweep["burst"] = level  # the replay's one canary: as many copies as the burst fired requests
    labels = {k: v for k, v in m.labels.items() if k not in ("engine", "engine_args")}
    labels.update({"repro_of": str(m.run_id), "repro_record": f"{choice.canary_id}#{choice.number}"})
    scenario: dict[str, Any] = {
        "name": f"repro-{choice.canary_id}-{choice.number}",
        "description": f"Replay of canary {choice.canary_id} record {choice.number} of run {m.run_id}",
        "endpoint": endpoint,
        "canaries": [canary],
        "background": {k: v for k, v in dict_or_empty(sc.get("background")).items() if v is not None},
        "sweep": sweep,
        "labels": labels,
    }
    if started:
        scenario["launcher"] = replay_launcher(run)
    return scenario, notes


def replay_launcher(run: RunData) -> dict[str, Any]:
    """The ``[launcher]`` that starts the engine the run started: the scenario's, else the embedded engine with the
    run's arguments; always talked to on this machine (no ``host``) and with ``require_approval = true``, whatever
    the run folder says."""
    launcher = run.manifest.scenario.get("launcher") if isinstance(run.manifest.scenario, dict) else None
    args = engine_args(run)
    if isinstance(launcher, dict):  # its host dropped: the replay talks to the engine on this machine
        table = {k: v for k, v in launcher.items() if v is not None and k != "host"}
    else:
        table = {"kind": "embedded", **({"args": args} if args else {})}
    return {**table, "require_approval": True}


def canary_from_body(canary_id: str, record: dict[str, Any]) -> dict[str, Any]:
    """A scenario canary entry from a recorded request body (runs whose manifest lacks the scenario)."""
    body = dict_or_empty(record.get("request"))
    spec: dict[str, Any] = {"id": canary_id, "kind": record.get("endpoint") or None}
    if isinstance(body.get("messages"), list):
        spec["messages"] = [
            {"role": str(x.get("role")), "content": str(x.get("content"))}
            for x in body["messages"]
            if isinstance(x, dict)
        ]
    else:
        spec["prompt"] = str(body.get("prompt", body.get("text", "")))  # "text": SGLang /generate
    sampling = dict_or_empty(body.get("sampling_params"))
    tokens = body.get("max_tokens", body.get("max_completion_tokens", sampling.get("max_new_tokens")))
    if isinstance(tokens, int):
        spec["max_tokens"] = tokens
    spec["seed"] = body.get("seed", sampling.get("sampling_seed"))
    spec["stream"] = bool(body.get("stream", False))
    return spec


def engine_args(run: RunData) -> list[str] | None:
    """The arguments the run's embedded engine was started with; None where loadgen did not start one."""
    engine = run.manifest.engine or {}
    cmd = engine.get("command")
    if engine.get("kind") != "embedded" or not isinstance(cmd, list) or cmd[: len(EMBEDDED_PREFIX)] != EMBEDDED_PREFIX:
        return None
    return [str(a) for a in cmd[len(EMBEDDED_PREFIX) :]]


def replay_script(run: RunData, choice: Choice, engine: str | None, python: str | None = None) -> str:
    """``replay.sh``: ``loadgen run replay.toml`` against the URL given; without one, where the run started an
    engine (``engine``: its command, as its approval shows it), the same, which starts that engine only once
    approved; else a refusal that asks for the URL.

    The script runs the loadgen it was made with, ``python -m loadgen`` (``python``, default
    ``sys.executable``: the interpreter that writes the reproducer, so that a virtualenv the README's set-up
    made need not be activated to replay); ``$LOADGEN`` names another command and
    ``$LOADGEN_PYTHON`` another interpreter; where neither is set and the interpreter is gone (the folder
    was copied to another machine), a ``loadgen`` on ``PATH``."""
    lines = [
        "#!/bin/sh",
        f"# Replays canary {comment_value(choice.canary_id)}, record {choice.number} of run "
        f"{comment_value(run.manifest.run_id)}, with loadgen:",
        "# the same request among background traffic shaped like the run's, at the record's level (replay.toml).",
        "# Usage: sh replay.sh BASE_URL [more `loadgen run` options, e.g. --out runs --canaries-per-level 4]",
        "# Requests go to BASE_URL only, and no API key is read unless you name its variable: --api-key-env NAME.",
        "# Which loadgen: the one that made this reproducer, run as `$LOADGEN_PYTHON -m loadgen` (no virtualenv",
        "# to activate); else a `loadgen` on PATH.",
        "#   LOADGEN_PYTHON: another Python to run it with (default: the one below)",
        '#   LOADGEN: another command instead, e.g. LOADGEN=loadgen or LOADGEN="python3 -m loadgen"',
    ]
    if engine is not None:
        lines += [
            "# Without BASE_URL it starts the engine the run started, a command whoever made the run folder chose:",
            f"#   {engine}",
            f"# and only with your approval of exactly that command: loadgen shows it, and the value of ${APPROVE_ENV}",
            "# that approves it.",
        ]
    lines += [
        "set -eu",
        'here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)',
        f"python=${{LOADGEN_PYTHON:-{shlex.quote(python or sys.executable or '')}}}",
        "run_loadgen() {",
        '  if [ -n "${LOADGEN-}" ]; then exec $LOADGEN "$@"; fi  # split into words on purpose: a command line',
        '  if [ -n "$python" ] && [ -x "$python" ]; then exec "$python" -m loadgen "$@"; fi',
        '  if command -v loadgen >/dev/null 2>&1; then exec loadgen "$@"; fi',
        '  echo "replay.sh: no loadgen: ${python:-no Python recorded} is not there and none is on PATH;'
        ' set LOADGEN_PYTHON or LOADGEN" >&2',
        "  exit 127",
        "}",
        'case "${1-}" in',
        '  http://*|https://*) host=$1; shift; run_loadgen run "$here/replay.toml" --host "$host" "$@" ;;',
        "esac",
    ]
    if engine is not None:
        lines.append(f'run_loadgen run "$here/replay.toml" "$@"  # starts the engine once ${APPROVE_ENV} approves it')
    else:
        lines += [
            'echo "replay.sh: give the URL of the endpoint to replay against: sh replay.sh http://HOST:PORT [options]'
            " (the run's own is in endpoint.json)\" >&2",
            "exit 2",
        ]
    return "\n".join(lines) + "\n"


def dict_or_empty(v: Any) -> dict[str, Any]:
    """A table read from a manifest or a record: the value where it is one, else an empty one."""
    return v if isinstance(v, dict) else {}
