"""The run folder's birth and ``manifest.json``: created once, never overwritten, finished at the end.

Why: a run folder is evidence; a second run must never clobber the first, and a run that dies must
still say what it was. ``Manifest`` is the one typed view of the file: every module reads and writes
it through ``read_manifest`` / ``write_manifest`` / ``update_manifest`` here, and ``RunStatus`` is
the one list of the states a run can be in. Keys this version does not know (older or newer tools)
are kept as they are. Writes are atomic (temporary file, then rename). No Locust imports.

Why this length: the sections are the one typed view of ``manifest.json`` and sit beside its only reader and
writers, which keep unknown keys and validate the whole; split apart, a section's type and the code that reads
it back would drift in two modules.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import socket
from difflib import get_close_matches
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator, with_config
from typing_extensions import TypedDict  # pydantic validates TypedDicts from here on Python < 3.12

from loadgen.core.errors import RunFolderError, control_character
from loadgen.core.runfiles import read_regular, write_file

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
    # ... but it ended with levels of failures (reports.analysis.health): the endpoint died
    ENDPOINT_FAILED = "endpoint_failed"
    INTERRUPTED = "interrupted"  # stopped early (signal, web UI stop, a dead worker, the tool's own failure)
    FAILED = "failed"  # a study could not go on (an engine that would not boot)

    @property
    def ended(self) -> bool:
        return self not in (RunStatus.PREPARED, RunStatus.RUNNING)

    @property
    def completed(self) -> bool:
        """Every planned stage met its quota (cleanly or not): the run was not cut short."""
        return self in (RunStatus.FINISHED, RunStatus.FINISHED_WITH_LOSSES, RunStatus.ENDPOINT_FAILED)


# Every field below is a JSON object of the file: a TypedDict, so readers keep subscripting it as the dict
# it is and mypy checks each key. All are partial (total=False: an older folder may lack a key) and open
# (extra="allow": a key this version does not know, written by an older or newer tool, is kept on rewrite).
OPEN = ConfigDict(extra="allow")


@with_config(OPEN)
class ToolInfo(TypedDict, total=False):
    name: str
    version: str


@with_config(OPEN)
class ServerSettings(TypedDict, total=False):
    """What the server stated about its own settings (``loadgen.core.wire.server_config.server_settings``),
    each None where no answer said it."""

    prefix_caching: bool | None
    block_size: int | None
    batch_invariant: bool | None
    enforce_eager: bool | None
    attention_backend: Any  # as the server spells it
    max_num_seqs: int | None
    dtype: Any  # as the server spells it
    tensor_parallel_size: int | None
    custom_all_reduce: bool | None  # None also where one rank reduces nothing
    metrics_refresh_steps: int | None  # SGLang's decode_log_interval: its running gauge is that many steps old at most
    cached_tokens_reported: bool | None


@with_config(OPEN)
class ServerConfig(TypedDict, total=False):
    """``server.config``: the settings, the raw ``*_info`` series of ``/metrics``, the routes that answered."""

    settings: ServerSettings
    info_series: dict[str, dict[str, str]]
    answered: list[str]


@with_config(OPEN)
class ServerFacts(TypedDict, total=False):
    """``server``: what the server said about itself at the probe."""

    models: Any  # the /v1/models body, as the server sent it (the API key redacted)
    version: str | None
    config: ServerConfig


@with_config(OPEN)
class AskedFeatures(TypedDict, total=False):
    """The fields of ``loadgen.core.wire.Features``: what will be asked of one endpoint kind."""

    return_token_ids: bool
    logprobs: bool
    top_logprobs: int
    tokens_as_ids: bool
    include_usage: bool
    sglext_output_ids: bool
    batch_sizes: bool


@with_config(OPEN)
class KindFacts(TypedDict, total=False):
    """``features[kind]``: what the probe settled for one endpoint kind."""

    features: AskedFeatures
    identity: str  # "token_ids", "tokens" or "text": what the probe's completion carried
    attempts: list[str]  # each probe request and its answer
    cached_tokens_reported: bool | None


@with_config(OPEN)
class SweepSection(TypedDict, total=False):
    """The parts of the resolved ``[sweep]`` the run folder's readers use; the rest is kept as written."""

    levels: list[int]
    canaries_per_level: int
    claim_max_rate: float | None


@with_config(OPEN)
class CanarySection(TypedDict, total=False):
    """The parts of a resolved ``[[canaries]]`` entry the run folder's readers use."""

    id: str
    expect_cache: str | None
    cache: str


@with_config(OPEN)
class ResolvedScenario(TypedDict, total=False):
    """``scenario``: the resolved scenario as JSON (``loadgen.core.scenario.Scenario.model_dump``, overrides
    applied). Typed where the run folder's readers look; sections copied on as written are plain JSON."""

    name: str
    endpoint: dict[str, Any]
    canaries: list[CanarySection]
    background: dict[str, Any]
    sweep: SweepSection
    labels: dict[str, str]
    launcher: dict[str, Any] | None


@with_config(OPEN)
class HostInfo(TypedDict, total=False):
    hostname: str
    platform: str
    python: str
    cpus: int | None


@with_config(OPEN)
class KvOffloadFacts(TypedDict, total=False):
    """``engine.kv_offload``: the CPU KV tier the engine was asked for (``[launcher]``, a cell's or a side's
    ``kv_offload``), as asked; whether the tier ran is the engine's counters' to say."""

    size_gib: float
    backend: str  # "native" or "lmcache"
    dtype: str | None  # the embedded engine's "bf16" or "fp8"; None: the engine's default


@with_config(OPEN)
class ProcessFacts(TypedDict, total=False):
    """One process of a topology loadgen started (``loadgen.launchers.topology``): an engine or the router."""

    name: str  # "prefill", "decode", "engine" (mode reload), "router"
    role: str  # "prefill", "decode", "both", "router"
    url: str
    command: str  # as typed, environment first
    log: str  # its log in the run folder
    kv_offload: KvOffloadFacts | None  # an engine's CPU KV tier as asked; None: none


@with_config(OPEN)
class EngineFacts(TypedDict, total=False):
    """``engine``: the engine loadgen started. Embedded: ``kind``, ``command`` (its arguments); a launcher's
    (``loadgen.launchers.Launcher.describe``): ``kind``, ``model``, ``command`` (as typed), ``env``, ``starts``;
    a topology's: ``kind``, ``topology`` (its mode), ``servers`` (the engines and the router), ``starts``.
    ``kv_offload``: the CPU KV tier asked of a launcher's engine; of a topology's, the first server's that has one
    (the prefill server in mode pd), each server's own in ``servers``."""

    kind: str
    model: str | None
    command: str | list[str] | None
    env: dict[str, str]
    starts: int
    topology: str
    servers: list[ProcessFacts]
    kv_offload: KvOffloadFacts | None


@with_config(OPEN)
class ColdBootSize(TypedDict, total=False):
    boots: int
    requests: int


@with_config(OPEN)
class BootFacts(TypedDict, total=False):
    """One engine start of a cold-boot study."""

    boot: int
    url: str
    started: str
    ready_s: float


@with_config(OPEN)
class EngineMetricsSummary(TypedDict, total=False):
    """``engine_metrics``: the ``/metrics`` scraper's summary (``collectors.engine_metrics.MetricsScraper.summary``)."""

    url: str
    available: bool | None
    notice: str | None
    engine: str | None
    interval_s: float
    samples: int
    failures: int
    last_error: str | None
    write_failures: int
    max_gap_s: float | None
    gaps: int


@with_config(OPEN)
class ServerScrape(TypedDict, total=False):
    """One entry of ``servers``: an engine behind the endpoint (``[[endpoint.servers]]``) and what its scraper saw
    (``collectors.server_metrics.ServerScrapers.facts``). ``metrics_url`` null: the scenario gave it none."""

    name: str
    role: str
    base_url: str
    metrics_url: str | None
    file: str  # its samples file in the run folder, ``engine_metrics-<name>.jsonl``
    engine_metrics: EngineMetricsSummary | None


@with_config(OPEN)
class EndedByClaim(TypedDict, total=False):
    """A sweep level the claim rule ended before its quota (``loadgen.load.stages.StageTracker.end_early``)."""

    level: int
    completed: int
    quota: int
    canary: str
    diverged: int
    reason: str


@with_config(OPEN)
class EndedByBackground(TypedDict, total=False):
    """A sweep level ended before its quota because its background failed for good (docs/design.md, "Failing
    background"; ``loadgen.load.stages.StageTracker.end_by_background``): the counts are the reporting load
    process's, of the background requests it sent in that level."""

    level: int
    completed: int
    quota: int
    background_errors: int
    background_requests: int
    first_error: str  # the first refused request's error message (a failure the endpoint answered), on one line


class EndpointInfo(BaseModel):
    """The endpoint the run was sent to, as resolved before any load."""

    model_config = ConfigDict(extra="allow")
    base_url: str | None = None
    kind: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    stream: bool | None = None

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        return None if v is None else env_name(v, "endpoint.api_key_env")


class EngineStarted(TypedDict, total=False):
    """What a study that started its engine adds to a new run's manifest (``loadgen.runs.prepare.prepare_run``)."""

    engine: EngineFacts
    step_trace_requested: bool
    cold_boot: ColdBootSize


class Manifest(BaseModel):
    """``manifest.json``: what the run was (scenario, endpoint, server, features) and how it went."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, validate_assignment=True)

    schema_version: int = Field(alias="schema")
    tool: ToolInfo = Field(default_factory=ToolInfo)
    run_id: str | None = None
    scenario_path: str | None = None
    scenario: ResolvedScenario = Field(default_factory=ResolvedScenario)
    endpoint: EndpointInfo = Field(default_factory=EndpointInfo)
    server: ServerFacts = Field(default_factory=ServerFacts)
    features: dict[str, KindFacts] = Field(default_factory=dict)  # per endpoint kind
    labels: dict[str, str] = Field(default_factory=dict)
    levels: list[int] = Field(default_factory=list)
    canaries_per_level: int | None = None
    started: str | None = None
    finished: str | None = None
    status: RunStatus | str = RunStatus.PREPARED  # a status this version does not know is kept, never rejected
    host: HostInfo = Field(default_factory=HostInfo)
    engine: EngineFacts | None = None  # the engine this tool started, if any
    step_trace_requested: bool = False  # that engine was told to write its step trace into the run folder
    cold_boot: ColdBootSize | None = None  # a cold-boot study's size
    boots: list[BootFacts] = Field(default_factory=list)  # a cold-boot study's engine starts
    engine_metrics: EngineMetricsSummary | None = None  # what the /metrics scraper saw
    servers: list[ServerScrape] = Field(default_factory=list)  # the servers behind the endpoint, each one's scraper
    notices: list[str] = Field(default_factory=list)
    workers: list[str] = Field(default_factory=list)
    workers_vanished: list[str] = Field(default_factory=list)
    # facts the load side records when its last stage ends; the run's owner settles ``status`` from them
    stages_finished: bool | None = None
    canaries_reported: int | None = None
    canary_errors: int | None = None  # of the canaries reported, those that failed
    canary_errors_trailing: int | None = None  # the failures in a row the run ended with (completion order)
    unsettled_levels: list[int] = Field(default_factory=list)
    # levels the claim rule (sweep.claim_max_rate) ended before their quota
    levels_ended_by_claim: list[EndedByClaim] = Field(default_factory=list)
    # levels whose background failed for good, ended before their quota
    levels_ended_by_background: list[EndedByBackground] = Field(default_factory=list)

    @field_validator("run_id")
    @classmethod
    def _plain_run_id(cls, v: str | None) -> str | None:
        return None if v is None else plain(v, "run_id")

    @field_validator("labels")
    @classmethod
    def _plain_labels(cls, v: dict[str, str]) -> dict[str, str]:
        return plain_labels(v, "labels")

    @model_validator(mode="after")
    def _plain_scenario(self) -> Manifest:
        sc = self.scenario
        endpoint = sc.get("endpoint")
        if isinstance(endpoint, dict) and isinstance(endpoint.get("api_key_env"), str):
            env_name(endpoint["api_key_env"], "scenario.endpoint.api_key_env")
        labels = sc.get("labels")
        if isinstance(labels, dict):
            plain_labels(labels, "scenario.labels")
        for i, canary in enumerate(sc.get("canaries") or []):
            if isinstance(canary, dict) and isinstance(canary.get("id"), str):
                plain(canary["id"], f"scenario.canaries.{i}.id")
        return self

    @property
    def run_status(self) -> RunStatus | None:
        """The status as a ``RunStatus``; None for one this version does not know."""
        try:
            return RunStatus(self.status)
        except ValueError:
            return None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def plain(value: str, where: str) -> str:
    """``value`` where it holds no control character (``errors.control_character``); a ``ValueError`` naming
    ``where`` otherwise: a run id, a label or a canary id lands in a reproducer's ``replay.sh`` and ``replay.toml``."""
    bad = control_character(value)
    if bad is not None:
        raise ValueError(f"{where} holds the control character {bad!r}; a run folder's names hold none")
    return value


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_name(value: str, where: str) -> str:
    """``value`` where it is an environment variable's name (it lands as ``$NAME`` in a reproducer's script
    and README); a ``ValueError`` otherwise, which never shows the value (it may be a key)."""
    if not _ENV_NAME.fullmatch(value):
        raise ValueError(f"{where}: expected the name of an environment variable (letters, digits and _)")
    return value


def plain_labels(labels: dict[str, str], where: str) -> dict[str, str]:
    for key, value in labels.items():
        plain(str(key), f"{where} key {key!r}")
        if isinstance(value, str):
            plain(value, f"{where}.{key}")
    return labels


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


def host_info() -> HostInfo:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


def write_manifest(run_dir: Path, manifest: Manifest) -> None:
    write_file(run_dir / MANIFEST, orjson.dumps(manifest.to_json(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))


def read_manifest(run_dir: Path) -> Manifest:
    """The manifest; a missing, unreadable, malformed or unknown-schema one is a RunFolderError."""
    path = run_dir / MANIFEST
    try:
        data = orjson.loads(read_regular(path))
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
        where = ".".join(str(x) for x in err["loc"])  # none for a check of several fields (names its own)
        raise RunFolderError(f"{path}: field {where}: {err['msg']}" if where else f"{path}: {err['msg']}") from None


FIELDS = frozenset(f.alias or name for name, f in Manifest.model_fields.items())  # the keys this version writes


def update_manifest(run_dir: Path, **changes: Any) -> Manifest:
    """Read, change the named fields, validate and write back atomically (``write_changes``)."""
    return write_changes(run_dir, read_manifest(run_dir), **changes)


def write_changes(run_dir: Path, current: Manifest, **changes: Any) -> Manifest:
    """``current`` (the manifest as its caller last read or wrote it, not read again) with the named fields
    changed, validated and written back atomically; returns what was written.

    Only fields of ``Manifest`` may be named: a misspelt one is a ``TypeError`` and nothing is written (it
    would otherwise land in the file as a key nobody reads). Unknown keys ``current`` holds are kept."""
    unknown = sorted(set(changes) - FIELDS)
    if unknown:
        hints = [
            f"{name!r} (did you mean {close[0]!r}?)" if (close := get_close_matches(name, FIELDS, 1)) else repr(name)
            for name in unknown
        ]
        raise TypeError(f"update_manifest: not a manifest field: {', '.join(hints)}")
    manifest = _validated({**current.to_json(), **changes}, run_dir / MANIFEST)
    write_manifest(run_dir, manifest)
    return manifest
