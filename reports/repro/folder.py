"""A minimal reproducer of one canary record: what to attach to an engine's issue tracker.

``loadgen repro RUN_DIR --canary ID [--record N]`` (``loadgen/cli/repro.py``) writes a folder with the
exact request body of one canary record, the endpoint and server it was sent to, the load in flight
while it ran, the run's reference completion beside this one (token by token, first divergence
marked), a README in plain words and a scenario plus script that replay it with ``loadgen run``.

This module assembles that folder from its parts (``reports.repro.choice``: the record and its
reference; ``in_flight``: the load; ``side_by_side``: the reference beside it; ``replay``: the
replay; ``readme``: the README) and words ``endpoint.json`` and
``completion.json`` itself. ``replay.toml`` is parsed back from its text (``tomllib``) and must hold the
scenario meant; the scenario returned for the CLI to validate is the one read back.

Pure: a loaded run, raw records and background rows in (the CLI reads them), file contents out. No
I/O, no printing. Never writes a header or an API key: only the body recorded as sent, and the
*name* of the key's environment variable in ``endpoint.json`` (evidence; the replay never reads it). The
command of the engine a replay starts comes from the caller (``engine_command``: the launchers' own
rendering, which reports may not import), so that the README, ``replay.sh`` and the approval that
``loadgen run`` asks for show one text.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from collectors.read.runfolder import RunData
from loadgen.core.errors import RunFolderError
from loadgen.core.wire.server_config import describe
from loadgen.core.wire.urls import api_path
from reports.render.shtext import comment_value, read_back
from reports.repro.choice import Choice, resolved_divergence
from reports.repro.in_flight import in_flight
from reports.repro.readme import readme
from reports.repro.replay import dict_or_empty, replay_scenario, replay_script
from reports.repro.side_by_side import side_by_side, side_by_side_md
from reports.repro.toml_writer import toml_text

FILES = (
    "README.md",
    "request.json",
    "endpoint.json",
    "in_flight.json",
    "completion.json",
    "side_by_side.md",
    "replay.toml",
    "replay.sh",
)


def endpoint_info(run: RunData, record: dict[str, Any]) -> dict[str, Any]:
    """The endpoint and server as the manifest recorded them (never the key: only its variable's name)."""
    m = run.manifest
    settings = dict_or_empty(dict_or_empty(m.server.get("config")).get("settings"))
    kind = str(record.get("endpoint") or m.endpoint.kind or "completions")
    return {
        "run_id": m.run_id,
        "run_status": None if m.status is None else str(m.status),
        "tool": m.tool,
        "base_url": m.endpoint.base_url,
        "route": api_path(m.endpoint.base_url, kind) if m.endpoint.base_url else None,
        "endpoint_kind": kind,
        "model": m.endpoint.model,
        "api_key_env": m.endpoint.api_key_env,
        "server_version": m.server.get("version"),
        "server_settings": settings,
        "server_settings_summary": describe(settings),
        "features": m.features.get(kind, m.features),
        "engine": m.engine,
        "labels": dict(m.labels),
        "host": m.host,
    }


def completion_info(
    choice: Choice, record: dict[str, Any], reference: dict[str, Any] | None, first_div: int | None
) -> dict[str, Any]:
    keep = (
        "request_id", "phase", "level", "status", "error_kind", "error_message", "http_status", "sent_at",
        "latency_s", "ttft_s", "finish_reason", "text", "token_ids", "tokens", "logprobs", "top_logprobs",
        "usage", "cache_action", "worker",
    )  # fmt: skip
    return {
        "canary_id": choice.canary_id,
        "record": choice.number,
        "records": choice.total,
        "numbering": "1-based: this canary's records in send order (ties by request id), every phase and failure",
        "first_divergence": first_div,
        "unit": choice.reference["unit"],
        "identity": choice.reference["identity"],
        "reference": {**choice.reference, "record": None if reference is None else {k: reference.get(k) for k in keep}},
        "this": {k: record.get(k) for k in keep},
    }


def build_folder(
    run: RunData,
    choice: Choice,
    record: dict[str, Any],
    reference: dict[str, Any] | None,
    background: Iterable[dict[str, Any]],
    engine_command: Callable[[dict[str, Any]], str],
) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Every file of the reproducer (name -> bytes) and the replay scenario (for the CLI to validate).
    ``engine_command``: the command a replay's ``[launcher]`` table starts, as its approval shows it."""
    first_div = resolved_divergence(choice, record, reference)
    load = in_flight(run, choice, record, background)
    endpoint = endpoint_info(run, record)
    scenario, notes = replay_scenario(run, choice, record)
    engine = engine_command(scenario["launcher"]) if "launcher" in scenario else None
    table = side_by_side(record, reference, first_div if choice.reference["unit"] == "token" else None)
    files = {
        "request.json": _json(record.get("request") if isinstance(record.get("request"), dict) else {}),
        "endpoint.json": _json(endpoint),
        "in_flight.json": _json(load),
        "completion.json": _json(completion_info(choice, record, reference, first_div)),
        "side_by_side.md": side_by_side_md(choice, table, first_div).encode(),
        "replay.toml": (_toml_header(choice, run, engine is not None) + toml_text(scenario)).encode(),
        "replay.sh": _replay_sh(run, choice, engine),
    }
    files["README.md"] = readme(
        run, choice, record, reference, first_div, load, endpoint, table, notes, engine
    ).encode()
    return {name: files[name] for name in FILES}, toml_read_back(files["replay.toml"], scenario)


def _replay_sh(run: RunData, choice: Choice, engine: str | None) -> bytes:
    """``replay.sh``, read back (``reports.render.shtext.read_back``): its last command whole, no comment a value
    (the engine's command among them) could end."""
    text = replay_script(run, choice, engine)
    last = ["run_loadgen", "run", "$here/replay.toml", "$@"] if engine is not None else ["exit", "2"]
    read_back(text, [last], [choice.canary_id, str(run.manifest.run_id), engine or ""])
    return text.encode()


def toml_read_back(text: bytes, scenario: dict[str, Any]) -> dict[str, Any]:
    """``replay.toml`` parsed back from its text (``tomllib``) before it is written: the scenario it holds,
    which must be the one meant (a comment or string a value from the run folder broke is a ``RunFolderError``)."""
    try:
        parsed = tomllib.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RunFolderError(f"replay.toml: does not read back as TOML ({exc}); not written") from None
    if parsed != _without_none(orjson.loads(orjson.dumps(scenario, option=orjson.OPT_SERIALIZE_NUMPY))):
        raise RunFolderError("replay.toml: a value from the run folder does not read back as written; not written")
    return parsed


def _toml_header(choice: Choice, run: RunData, engine: bool) -> str:
    started = (
        "# Without --host, loadgen starts the [launcher] below, the run's engine, only once you approve its command.\n"
        if engine
        else ""
    )
    return (
        f"# Replay of canary {comment_value(choice.canary_id)}, record {choice.number} of run "
        f"{comment_value(run.manifest.run_id)}.\n"
        "# Run it with: sh replay.sh BASE_URL  (or: loadgen run replay.toml --host BASE_URL)\n"
        f"{started}\n"
    )


def _without_none(value: Any) -> Any:
    """A JSON value as TOML holds it: no null in any table (``toml_text`` leaves such keys out)."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def _json(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"
