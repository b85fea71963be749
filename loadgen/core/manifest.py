"""The run folder's birth and ``manifest.json``: created once, never overwritten, finished at the end.

Why: a run folder is evidence; a second run must never clobber the first, and a run that dies must
still say what it was. ``Manifest`` is the one typed view of the file: every module reads and writes
it through ``read_manifest`` / ``write_manifest`` / ``update_manifest`` here, and ``RunStatus`` is
the one list of the states a run can be in. Keys this version does not know (older or newer tools)
are kept as they are. Writes are atomic (temporary file, then rename). No Locust imports.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import socket
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from loadgen.core.errors import RunFolderError

MANIFEST = "manifest.json"
MANIFEST_SCHEMA = 1


class RunStatus(StrEnum):
    """Where a run is: prepared (folder and probe done), running, then one of the ends.

    Only ``finished`` is a clean end. ``finished_with_losses`` and ``endpoint_failed`` also completed
    every stage, but their figures stand on missing data: records that could not be written, or
    canaries the endpoint failed."""

    PREPARED = "prepared"
    RUNNING = "running"
    FINISHED = "finished"  # every planned stage met its canary quota
    FINISHED_WITH_LOSSES = "finished_with_losses"  # ... but records could not be written (disk full, size limit)
    ENDPOINT_FAILED = "endpoint_failed"  # ... but it ended with levels of failures (reports.health): the endpoint died
    INTERRUPTED = "interrupted"  # stopped early (signal, web UI stop, a dead worker, the tool's own failure)
    FAILED = "failed"  # a study could not go on (an engine that would not boot)

    @property
    def ended(self) -> bool:
        return self not in (RunStatus.PREPARED, RunStatus.RUNNING)

    @property
    def completed(self) -> bool:
        """Every planned stage met its quota (cleanly or not): the run was not cut short."""
        return self in (RunStatus.FINISHED, RunStatus.FINISHED_WITH_LOSSES, RunStatus.ENDPOINT_FAILED)


class EndpointInfo(BaseModel):
    """The endpoint the run was sent to, as resolved before any load."""

    model_config = ConfigDict(extra="allow")
    base_url: str | None = None
    kind: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    stream: bool | None = None


class Manifest(BaseModel):
    """``manifest.json``: what the run was (scenario, endpoint, server, features) and how it went."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, validate_assignment=True)

    schema_version: int = Field(alias="schema")
    tool: dict[str, Any] = Field(default_factory=dict)
    run_id: str | None = None
    scenario_path: str | None = None
    scenario: dict[str, Any] = Field(default_factory=dict)  # the resolved scenario, as JSON
    endpoint: EndpointInfo = Field(default_factory=EndpointInfo)
    server: dict[str, Any] = Field(default_factory=dict)  # what the server said about itself (/v1/models, /version)
    features: dict[str, Any] = Field(default_factory=dict)  # per endpoint kind: what was asked, what the probe saw
    labels: dict[str, str] = Field(default_factory=dict)
    levels: list[int] = Field(default_factory=list)
    canaries_per_level: int | None = None
    started: str | None = None
    finished: str | None = None
    status: RunStatus | str = RunStatus.PREPARED  # a status this version does not know is kept, never rejected
    host: dict[str, Any] = Field(default_factory=dict)
    engine: dict[str, Any] | None = None  # the engine this tool started, if any
    cold_boot: dict[str, Any] | None = None  # a cold-boot study's size
    boots: list[dict[str, Any]] = Field(default_factory=list)  # a cold-boot study's engine starts
    engine_metrics: dict[str, Any] | None = None  # what the /metrics scraper saw
    notices: list[str] = Field(default_factory=list)
    workers: list[str] = Field(default_factory=list)
    workers_vanished: list[str] = Field(default_factory=list)
    # facts the load side records when its last stage ends; the run's owner settles ``status`` from them
    stages_finished: bool | None = None
    canaries_reported: int | None = None
    canary_errors: int | None = None  # of the canaries reported, those that failed
    canary_errors_trailing: int | None = None  # the failures in a row the run ended with (completion order)
    unsettled_levels: list[int] = Field(default_factory=list)
    # levels the claim rule (sweep.claim_max_rate) ended before their quota: level, completed, quota, canary, reason
    levels_ended_by_claim: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def run_status(self) -> RunStatus | None:
        """The status as a ``RunStatus``; None for one this version does not know."""
        try:
            return RunStatus(self.status)
        except ValueError:
            return None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def create_run_dir(out_root: Path, name: str) -> Path:
    """Make a new, empty folder ``out_root/<UTC time>-<name>``; an existing one is never reused."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out_root.mkdir(parents=True, exist_ok=True)
    for n in range(1000):
        path = out_root / (f"{stamp}-{name}" if n == 0 else f"{stamp}-{name}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise RunFolderError(f"{path}: cannot create run folder ({exc.strerror or exc})") from None
        return path
    raise RunFolderError(f"{out_root}: could not find a free run folder name for {name!r}")


def host_info() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


def write_manifest(run_dir: Path, manifest: Manifest) -> None:
    tmp = run_dir / f".{MANIFEST}.tmp"
    tmp.write_bytes(orjson.dumps(manifest.to_json(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    os.replace(tmp, run_dir / MANIFEST)


def read_manifest(run_dir: Path) -> Manifest:
    """The manifest; a missing, unreadable, malformed or unknown-schema one is a RunFolderError."""
    path = run_dir / MANIFEST
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise RunFolderError(f"{path}: missing (every run folder has a manifest.json)") from None
    except OSError as exc:
        raise RunFolderError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except orjson.JSONDecodeError as exc:
        raise RunFolderError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RunFolderError(f"{path}: expected a JSON object, got {type(data).__name__}")
    if data.get("schema") != MANIFEST_SCHEMA:
        raise RunFolderError(
            f"{path}: manifest schema {data.get('schema')!r} is not supported (expected {MANIFEST_SCHEMA})"
        )
    return _validated(data, path)


def _validated(data: dict[str, Any], path: Path) -> Manifest:
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise RunFolderError(f"{path}: field {where}: {err['msg']}") from None


def update_manifest(run_dir: Path, **changes: Any) -> Manifest:
    """Read, change the named fields, validate and write back atomically."""
    current = read_manifest(run_dir).to_json()
    manifest = _validated({**current, **changes}, run_dir / MANIFEST)
    write_manifest(run_dir, manifest)
    return manifest
