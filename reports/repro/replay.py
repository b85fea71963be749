"""The replay of a reproducer: the scenario ``replay.toml`` holds and ``replay.sh``, which runs it.

So that an engine's developers can watch the record's failure again with ``loadgen run``: the same
canary among background traffic drawn from the run's own ``[background]`` settings, at the record's
level, with the run's warm-up and baseline, against the same endpoint, or against an embedded engine
started with the run's arguments. Where the manifest lacks the canary's scenario entry, the entry is
rebuilt from the recorded request body (``canary_from_body``).

Pure: the run and the record in, a scenario dict, notes and the script's text out. Never writes an
API key (only the *name* of its environment variable); validating the scenario is the CLI's job, and
writing it as TOML ``reports.repro.toml_writer``'s.
"""

from __future__ import annotations

import shlex
import sys
from typing import Any

from collectors.read.runfolder import RunData
from reports.render.shtext import comment_value
from reports.repro.choice import Choice

EMBEDDED_PREFIX = ["-P", "-m", "loadgen.engine", "--host", "127.0.0.1", "--port", "0"]


def replay_scenario(run: RunData, choice: Choice, record: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A scenario that sends this canary again with background shaped like the run's, at this record's
    level; and plain sentences on what it cannot carry over."""
    m = run.manifest
    sc = m.scenario if isinstance(m.scenario, dict) else {}
    notes: list[str] = []
    endpoint = {k: v for k, v in dict_or_empty(sc.get("endpoint")).items() if v is not None and k != "base_url"}
    if not endpoint:
        endpoint = {k: v for k, v in (("kind", m.endpoint.kind), ("model", m.endpoint.model)) if v is not None}
        if m.endpoint.api_key_env:
            endpoint["api_key_env"] = m.endpoint.api_key_env
    started = m.engine is not None  # loadgen started the engine: the replay starts it the same way
    if not started and m.endpoint.base_url:
        endpoint["base_url"] = m.endpoint.base_url
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
    launcher = sc.get("launcher")
    if isinstance(launcher, dict) and started:
        scenario["launcher"] = {k: v for k, v in launcher.items() if v is not None}
    return scenario, notes


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


def replay_script(
    run: RunData, choice: Choice, default_host: str | None, key_env: str | None = None, python: str | None = None
) -> str:
    """``replay.sh``: ``loadgen run replay.toml`` against the URL given, else the run's own endpoint
    (or the engine loadgen started for it, with the same arguments).

    The script runs the loadgen it was made with, ``python -m loadgen`` (``python``, default
    ``sys.executable``: the interpreter that writes the reproducer, so that a virtualenv the README's set-up
    made need not be activated to replay); ``$LOADGEN`` names another command and
    ``$LOADGEN_PYTHON`` another interpreter; where neither is set and the interpreter is gone (the folder
    was copied to another machine), a ``loadgen`` on ``PATH``."""
    args = engine_args(run)
    lines = [
        "#!/bin/sh",
        f"# Replays canary {comment_value(choice.canary_id)}, record {choice.number} of run "
        f"{comment_value(run.manifest.run_id)}, with loadgen:",
        "# the same request among background traffic shaped like the run's, at the record's level (replay.toml).",
        "# Usage: sh replay.sh [BASE_URL] [more `loadgen run` options, e.g. --out runs --canaries-per-level 4]",
        "# Which loadgen: the one that made this reproducer, run as `$LOADGEN_PYTHON -m loadgen` (no virtualenv",
        "# to activate); else a `loadgen` on PATH.",
        "#   LOADGEN_PYTHON: another Python to run it with (default: the one below)",
        '#   LOADGEN: another command instead, e.g. LOADGEN=loadgen or LOADGEN="python3 -m loadgen"',
    ]
    if key_env:
        lines.append(
            f"#   the API key is read from ${comment_value(key_env)} (the scenario names the variable; "
            "no key is stored here)"
        )
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
        f"host={shlex.quote(default_host or '')}",
        'case "${1-}" in http://*|https://*) host=$1; shift ;; esac',
        'if [ -n "$host" ]; then',
        '  run_loadgen run "$here/replay.toml" --host "$host" "$@"',
        "fi",
    ]
    extra = "".join(f" --engine-arg={shlex.quote(a)}" for a in args or [])
    if args is not None:
        lines.append("# no URL: start the embedded engine as the run did")
    lines.append(f'run_loadgen run "$here/replay.toml"{extra} "$@"')
    return "\n".join(lines) + "\n"


def dict_or_empty(v: Any) -> dict[str, Any]:
    """A table read from a manifest or a record: the value where it is one, else an empty one."""
    return v if isinstance(v, dict) else {}
