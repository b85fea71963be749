"""Read a run folder into columns: the one reader the reports, ``compare``, ``check`` and ``export`` use.

Why: a run can hold a million canary records (docs/design.md, "run folder"). Canary files go through
``collectors.read.fastcolumns`` (the columns ``collectors.read.columns`` defines, without a Python step per
token); a big run is read by several processes at once (``collectors.read.parallel``), each taking a
byte range of whole lines. ``reference=True`` reads with the reference builder, one process: the
benchmarks and the agreement tests compare the two.

Tolerates a torn or corrupt line (skipped and counted per file; a last line cut short without its
newline is told apart as ``torn_tail``), a record with a value no column can hold (skipped, its line
and reason in ``FileRead.malformed``), unknown extra keys (ignored), missing optional keys, and
numbers no analysis can use (``collectors.read.columns``). Raises ``RunFolderError`` (naming the file)
for an unusable folder or an unknown schema. Must not print, and must not import Locust or anything
under ``loadgen`` but its ground floor (``loadgen.core``).

A prefill/decode run's servers (the manifest's ``scenario.endpoint.servers``) each have their own samples
file (``collectors.server_metrics.samples_file``); each is read as ``engine_metrics.jsonl`` is, into one
sorted series per server (``ServerSeries``). A folder without servers reads exactly as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]

from collectors.client_cpu import ClientCpuSample, read_client_cpu
from collectors.jsonl import iter_objects, record_line_limit
from collectors.losses import read_processes
from collectors.read.columns import (
    BATCH_OTHERS,
    MAX_ABS_LOGPROB,
    SCALARS,
    CanaryColumns,
    ColumnBuilder,
    FileRead,
    _torn_tail,
    cached_tokens,
    top_gap,
    top_gap_counted,
    usable_logprob,
)
from collectors.read.matrices import FloatMatrix, IntMatrix, _num, pad_int
from collectors.read.parallel import read_canaries
from collectors.read.rescores import RescoresRead, read_rescores
from collectors.read.steps import StepTable, read_traces, trace_paths
from collectors.server_metrics import samples_file
from loadgen.core import background_row
from loadgen.core.errors import RunFolderError
from loadgen.core.manifest import Manifest, read_manifest
from loadgen.core.prepared import PreparedRun

__all__ = [
    "BATCH_OTHERS",
    "MAX_ABS_LOGPROB",
    "SCALARS",
    "CanaryColumns",
    "ColumnBuilder",
    "FileRead",
    "FloatMatrix",
    "IntMatrix",
    "KvSeries",
    "RunData",
    "ServerSeries",
    "_torn_tail",
    "cached_tokens",
    "load_run",
    "pad_int",
    "top_gap",
    "top_gap_counted",
    "usable_logprob",
]

MANIFEST_SCHEMA = 1


@dataclass(frozen=True)
class KvSeries:
    """One engine's prompt tokens by source and offload bytes (``engine_metrics*.jsonl``'s ``tokens_computed``,
    ``tokens_local_hit``, ``tokens_external``, ``offload_store_bytes``, ``offload_load_bytes``): counters at the
    sample times ``t`` (sorted), NaN where a sample lacks one (an engine without them, an older file)."""

    t: FloatMatrix
    computed: FloatMatrix
    local: FloatMatrix
    external: FloatMatrix
    store_bytes: FloatMatrix
    load_bytes: FloatMatrix


@dataclass(frozen=True)
class ServerSeries:
    """One server's scraped running gauge (``engine_metrics-<name>.jsonl``): sample times (epoch s, sorted) and
    the gauge at them (NaN where absent); both empty when the server left no samples."""

    name: str
    role: str
    t: FloatMatrix
    running: FloatMatrix
    kv: KvSeries | None = None  # its prompt tokens by source and offload bytes; None: it published none


@dataclass
class RunData:
    run_dir: Path
    manifest: Manifest
    prepared: PreparedRun  # what the manifest says of the plan, read once (servers, level quota, claim, side)
    canaries: CanaryColumns
    files: list[FileRead]
    background: Any | None = None  # pandas.DataFrame of background rows, or None when absent
    background_files: list[FileRead] = field(default_factory=list)
    engine_t: FloatMatrix | None = None  # engine metric sample times (epoch s), sorted
    engine_running: FloatMatrix | None = None  # running gauge at those times (NaN where absent)
    write_failures: dict[str, int] = field(default_factory=dict)  # ``collectors.losses.ProcessFiles.failures``
    engine_prefix_queries: FloatMatrix | None = None  # prefix-cache query counter (tokens) at those times
    engine_prefix_hits: FloatMatrix | None = None  # prefix-cache hit counter (tokens) at those times
    client_cpu: list[ClientCpuSample] = field(default_factory=list)  # the load processes' CPU (client_cpu*.jsonl)
    servers: list[ServerSeries] = field(default_factory=list)  # the servers behind the endpoint; none for one engine
    steps: StepTable | None = None  # the engine step trace (engine_steps*.jsonl and any brought); None: none
    rescores: RescoresRead | None = None  # the re-score check's records (rescores*.jsonl; collectors.read.rescores)
    engine_kv: KvSeries | None = None  # the endpoint's prompt tokens by source and offload bytes; None: none

    @property
    def skipped_lines(self) -> int:
        return sum(f.skipped for f in self.files) + sum(f.skipped for f in self.background_files)


def load_run(
    run_dir: Path,
    *,
    workers: int | None = None,
    reference: bool = False,
    engine_traces: Sequence[Path] = (),
    manifest: Manifest | None = None,
) -> RunData:
    """Read ``manifest.json``, every ``canaries*.jsonl`` and, where present, background and engine files.

    ``workers`` and ``reference``: see ``collectors.read.parallel.read_canaries``. ``engine_traces``: step trace
    files brought from elsewhere (an engine the tool did not start), read after the folder's own. ``manifest``:
    the folder's as its caller holds it, having just written it (the run's end): not read again."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunFolderError(f"{run_dir}: not a directory (expected a run folder with manifest.json)")
    manifest = manifest or read_manifest(run_dir)
    prepared = PreparedRun.of(manifest)
    canary_paths = sorted(run_dir.glob("canaries*.jsonl"))
    if not canary_paths:
        raise RunFolderError(f"{run_dir}: no canaries*.jsonl file (is this a run folder?)")
    line_limit = record_line_limit(prepared.max_response_bytes)  # no line of a record of this run is longer
    canaries, files = read_canaries(canary_paths, workers=workers, reference=reference, line_limit=line_limit)
    background, bg_files = _read_background(sorted(run_dir.glob("background*.jsonl")))
    engine_t, engine_running, prefix_queries, prefix_hits, *kv = _read_engine(run_dir / "engine_metrics.jsonl")
    traces = trace_paths(run_dir, engine_traces)
    return RunData(
        run_dir=run_dir,
        manifest=manifest,
        prepared=prepared,
        canaries=canaries,
        files=files,
        background=background,
        background_files=bg_files,
        engine_t=engine_t,
        engine_running=engine_running,
        engine_prefix_queries=prefix_queries,
        engine_prefix_hits=prefix_hits,
        write_failures=read_processes(run_dir).failures,
        client_cpu=read_client_cpu(run_dir),
        servers=[_read_server(run_dir, s.name, s.role) for s in prepared.servers],
        steps=read_traces(traces) if traces else None,
        rescores=read_rescores(run_dir, line_limit),
        engine_kv=_kv(engine_t, kv),
    )


def _read_server(run_dir: Path, name: str, role: str) -> ServerSeries:
    t, running, _, _, *kv = _read_engine(run_dir / samples_file(name))
    empty = np.zeros(0, np.float64)
    return ServerSeries(name, role, empty if t is None else t, empty if running is None else running, _kv(t, kv))


def _kv(t: FloatMatrix | None, series: list[FloatMatrix | None]) -> KvSeries | None:
    """The by-source and offload counters, or None where no sample holds any of them."""
    if t is None or not any(s is not None and np.isfinite(s).any() for s in series):
        return None
    return KvSeries(t, *(np.full(len(t), np.nan) if s is None else s for s in series))


def _parse_rows(path: Path) -> tuple[list[dict[str, Any]], FileRead]:
    skipped: list[int] = []
    rows = list(iter_objects(path, skipped))
    return rows, FileRead(path.name, len(rows), len(skipped), skipped, _torn_tail(path, skipped))


def _read_background(paths: list[Path]) -> tuple[Any | None, list[FileRead]]:
    if not paths:
        return None, []
    rows: list[dict[str, Any]] = []
    reads: list[FileRead] = []
    for p in paths:
        got, read = _parse_rows(p)
        rows.extend(got)
        reads.append(read)
    # one column per ``BackgroundRow`` field, None where a row lacks it (an older file); numbers as float64
    frame = pd.DataFrame({c: pd.Series([r.get(c) for r in rows], dtype=object) for c in background_row.FIELDS})
    for c in background_row.NUMERIC:
        frame[c] = pd.to_numeric(frame[c], errors="coerce").astype(np.float64)
    return frame, reads


def _read_engine(path: Path) -> tuple[FloatMatrix | None, ...]:
    """Sample times (sorted), then the running gauge, the prefix-cache query and hit counters and the ``KV_SERIES``
    at them."""
    if not path.exists():
        return (None,) * (1 + len(_ENGINE_SERIES))
    rows, _ = _parse_rows(path)
    t = np.array([_num(r.get("t")) for r in rows], dtype=np.float64)
    keep = ~np.isnan(t)
    order = np.argsort(t[keep], kind="stable")
    series = [np.array([_num(r.get(k)) for r in rows], dtype=np.float64)[keep][order] for k in _ENGINE_SERIES]
    return (t[keep][order], *series)


# the collector's names (collectors.metric_names), read by name: an absent one is NaN, so older files read as before
KV_SERIES = ("tokens_computed", "tokens_local_hit", "tokens_external", "offload_store_bytes", "offload_load_bytes")
_ENGINE_SERIES = ("running", "prefix_cache_queries", "prefix_cache_hits", *KV_SERIES)
