"""``loadgen coldboot``: restart the engine K times; after each boot send every canary N times, one at a time.

Why: some divergence is not about load at all: the first request after a boot can differ from the
ones after it (a cache-miss prefill reduces differently from a cache-hit one; the D3 study). That
needs fresh engine processes and strictly serialised requests, so no Locust here: a blocking
client (``loadgen.load.client``, the load path's own request code) sends each canary and every
completion is written as a ``CanaryRecord`` (phase ``sweep``, level 0, with ``boot`` and
``boot_index``) the moment it returns. Each boot repeats the same preamble (health wait, then the
probe, whose prompt shares no prefix with a canary), so boot 1 is not special.

Writes a normal run folder (manifest, ``canaries.jsonl``, ``engine.log``, report files) plus
``coldboot.json`` and ``coldboot.md``. Raises ``LoadgenError`` subclasses; prints nothing.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from collectors.jsonl import JsonlWriter
from loadgen.core.errors import EngineError, LoadgenError, ScenarioError, UsageError
from loadgen.core.manifest import (
    BootFacts,
    ColdBootSize,
    EngineStarted,
    Manifest,
    RunStatus,
    now_iso,
    update_manifest,
)
from loadgen.core.record import CanaryRecord
from loadgen.core.runfiles import copy_file
from loadgen.core.scenario import Canary, ColdBootSpec, LauncherSpec, Scenario, load_scenario, with_overrides
from loadgen.core.wire import Features
from loadgen.core.wire.urls import api_path
from loadgen.launchers.launcher import Launcher
from loadgen.launchers.process import keep_failed_log
from loadgen.load.canary_request import canary_body, canary_record, new_request_id, prepare_cache
from loadgen.load.client import make_client, send_canary
from loadgen.load.flush import Flusher, flush_facts, flusher_for
from loadgen.runs.lifecycle import OwnedRun
from loadgen.runs.prepare import api_key_of, canary_features, endpoint_kinds, prepare_run, wanted_features
from loadgen.runs.probe import probe
from loadgen.studies.events import BootRequest, BootStarted, EngineReady, LoadEnded, Progress, no_progress
from reports.analysis.coldboot import ColdBootSummary, render_markdown, summarise
from reports.render.writer import report_json, write_text


@dataclass
class ColdBootResult:
    run_dir: Path
    status: RunStatus  # finished / failed / interrupted
    summary: ColdBootSummary


@dataclass
class _Boot:
    """What one boot's requests need: where to send, as which model, asking for which fields."""

    run_id: str
    base_url: str
    model: str
    features: dict[str, Features]  # per endpoint kind, as probed on boot 1
    api_key: str | None
    number: int
    flusher: Flusher | None = None  # the offload canaries' flush, sent to this boot's engine


def study_size(scenario: Scenario, boots: int | None, requests: int | None) -> ColdBootSpec:
    """The scenario's ``[cold_boot]`` (or the D3 default, 6 x 6), with command-line overrides."""
    if boots is not None and boots < 1:
        raise UsageError(f"--boots must be at least 1, got {boots}")
    if requests is not None and requests < 2:
        raise UsageError(f"--requests must be at least 2 (request 1 is compared with 2..N), got {requests}")
    base = scenario.cold_boot or ColdBootSpec()
    return ColdBootSpec(boots=boots or base.boots, requests=requests or base.requests)


def launcher_for(scenario: Scenario, source: str, launcher: LauncherSpec | None) -> LauncherSpec:
    """The engine to restart: ``launcher``, the scenario's ``[launcher]``, else the embedded engine."""
    if scenario.topology is not None and scenario.topology.mode != "colocated":
        raise ScenarioError(
            f"{source}: field topology: a cold-boot study restarts one engine; a prefill/decode topology is "
            "not restarted (remove [topology], or set its mode to 'colocated')"
        )
    chosen = launcher or scenario.launcher
    if chosen is not None:
        return chosen
    if scenario.endpoint.base_url is not None:
        raise ScenarioError(
            f"{source}: field endpoint.base_url: a cold-boot study restarts the engine, so it needs a [launcher] "
            "(kind 'command' runs any shell command that serves on {port}); remove base_url or add one"
        )
    return LauncherSpec()


def boot_canary(boot: _Boot, scenario: Scenario, canary: Canary, index: int, client: Any) -> CanaryRecord:
    """One canary sent on ``boot``, its record made."""
    features = canary_features(boot.features[scenario.canary_kind(canary)], canary)
    flush = None if boot.flusher is None else partial(boot.flusher, client, scenario.canary_kind(canary), _never)
    step = prepare_cache(client, canary, scenario.endpoint.cache_reset_path, busy=False, flush=flush)
    kind, body = canary_body(scenario, canary, model=boot.model, features=features, salt=step.action == "salt")
    request_id = new_request_id()
    out = send_canary(
        client,
        api_path(boot.base_url, kind),
        kind,
        body,
        request_id,
        tokens_as_ids=features.tokens_as_ids,
        secret=boot.api_key,
    )
    return canary_record(
        out,
        request_id=request_id,
        run_id=boot.run_id,
        canary=canary,
        kind=kind,
        body=body,
        phase="sweep",
        level=0,
        inflight_at_send=0,
        worker="coldboot",
        cache_action=step.action,
        cache_reset=step.reset,
        flush_tokens=step.flush_tokens,
        boot=boot.number,
        boot_index=index,
    )


def _never() -> bool:
    """A cold boot's flush is not stopped midway: its canaries go one at a time, each awaited."""
    return False


def _features(manifest: Manifest) -> dict[str, Features]:
    return {k: Features(**v["features"]) for k, v in manifest.features.items()}


def _send_all(
    boot: _Boot, scenario: Scenario, requests: int, writer: JsonlWriter, on_request: Callable[[int, int, bool], None]
) -> list[CanaryRecord]:
    """Every canary ``requests`` times, one at a time; ``on_request(done, total, ok)`` after each."""
    ep = scenario.endpoint
    client = make_client(
        boot.base_url,
        connect_timeout_s=ep.connect_timeout_s,
        read_timeout_s=ep.read_timeout_s,
        api_key=boot.api_key,
        request_timeout_s=ep.request_timeout_s,
        max_response_bytes=ep.max_response_bytes,
    )
    records = []
    total = requests * len(scenario.canaries)
    try:
        for canary in scenario.canaries:
            for index in range(1, requests + 1):
                record = boot_canary(boot, scenario, canary, index, client)
                writer.write(record)
                records.append(record)
                on_request(len(records), total, record.status == "ok")
    finally:
        client.close()
    return records


class _Study:
    """One cold-boot study in progress: the launcher, the run folder (made on boot 1), its writer and log."""

    def __init__(
        self,
        scenario: Scenario,
        source: str,
        spec: LauncherSpec,
        size: ColdBootSpec,
        out_dir: Path,
        progress: Progress = no_progress,
    ) -> None:
        self.scenario, self.source, self.size, self.out_dir = scenario, source, size, out_dir
        self.progress = progress
        self.api_key = api_key_of(scenario, source)
        self.engines = Launcher(spec)
        self.tmp = Path(tempfile.mkdtemp(prefix="loadgen-coldboot-"))
        self.run_dir: Path | None = None
        self.writer: JsonlWriter | None = None
        self.records: list[CanaryRecord] = []
        self.boots: list[BootFacts] = []
        self.status = RunStatus.INTERRUPTED
        self.owned: OwnedRun | None = None
        self.features: dict[str, Features] = {}
        self.model = ""
        self.flush_facts: tuple[int | None, int | None] = (None, None)  # as the probe of boot 1 read them

    def run(self) -> None:
        try:
            for number in range(1, self.size.boots + 1):
                self.boot(number)
        except LoadgenError:
            self.status = RunStatus.FAILED
            raise
        self.status = RunStatus.FINISHED

    def boot(self, number: int) -> None:
        """(Re)start the engine, repeat the preamble (health, probe), send every canary N times."""
        self.progress(BootStarted(number, self.size.boots))
        t0 = time.monotonic()
        log = self.tmp / "engine.log"
        try:
            engine = self.engines.start(log) if number == 1 else self.engines.restart(log)
        except EngineError as exc:  # the tmp folder goes at close: keep the log where the user looks
            raise keep_failed_log(exc, log, self.run_dir or self.out_dir) from None
        ready_s = time.monotonic() - t0
        self.progress(EngineReady(engine.url, ready_s))
        self.boots.append({"boot": number, "url": engine.url, "started": now_iso(), "ready_s": round(ready_s, 3)})
        labels = {"engine": self.engines.spec.kind, **self.scenario.labels}
        # every request is sent at level 0: the manifest says so, and counts boots x requests there
        per_level = self.size.boots * self.size.requests
        booted = with_overrides(
            self.scenario, base_url=engine.url, labels=labels, levels=[0], canaries_per_level=per_level
        )
        if self.run_dir is None:  # boot 1: the probe, the run folder and its manifest
            size = ColdBootSize(boots=self.size.boots, requests=self.size.requests)
            extra: EngineStarted = {"engine": self.engines.describe(), "cold_boot": size}
            self.run_dir, manifest = prepare_run(booted, source=self.source, out_dir=self.out_dir, extra=extra)
            self.owned = OwnedRun.begin(self.run_dir, manifest, base_url=None, api_key=None)
            self.writer = JsonlWriter(self.run_dir / "canaries.jsonl")
            self.features, self.model = _features(manifest), str(manifest.endpoint.model)
            self.flush_facts = flush_facts(manifest)
        else:
            probe(
                engine.url,
                model=self.model,
                kinds=endpoint_kinds(booted),
                wanted=wanted_features(booted),
                api_key=self.api_key,
                timeout_s=min(self.scenario.endpoint.connect_timeout_s, 10.0),
            )
        assert self.writer is not None
        flusher = flusher_for(booted, engine.url, self.model, self.flush_facts)
        boot = _Boot(self.run_dir.name, engine.url, self.model, self.features, self.api_key, number, flusher)

        def on_request(done: int, total: int, ok: bool) -> None:
            self.progress(BootRequest(number, self.size.boots, done, total, ok))

        self.records += _send_all(boot, booted, self.size.requests, self.writer, on_request)

    def close(self, *, report: bool) -> ColdBootSummary:
        """Stop the engine, keep its log in the run folder, write the cold-boot summary and end the run,
        whatever happened. Returns the summary."""
        self.engines.stop()
        if self.writer is not None:
            self.writer.close()
        summary = summarise(self.records, boots=self.size.boots, requests=self.size.requests)
        if self.run_dir is not None and self.owned is not None:
            log = self.tmp / "engine.log"
            if log.exists():
                copy_file(log, self.run_dir / "engine.log")
            update_manifest(
                self.run_dir, boots=self.boots, engine=self.engines.describe(), canaries_reported=len(self.records)
            )
            write_text(self.run_dir / "coldboot.json", report_json(summary))
            write_text(self.run_dir / "coldboot.md", render_markdown(summary))
            self.progress(LoadEnded(self.run_dir, reporting=report))
            self.owned.end(self.status, report=report)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return summary


def cold_boot(
    scenario_path: Path,
    *,
    out_dir: Path = Path("runs"),
    boots: int | None = None,
    requests: int | None = None,
    labels: dict[str, str] | None = None,
    launcher: LauncherSpec | None = None,
    report: bool = True,
    progress: Progress = no_progress,
) -> ColdBootResult:
    """Run the cold-boot study of ``scenario_path`` into a new run folder under ``out_dir``; ``progress`` hears
    each boot, its engine's start time and each request (``loadgen.studies.events``), and must not raise."""
    source = str(scenario_path)
    scenario = with_overrides(load_scenario(scenario_path), labels=labels)
    size = study_size(scenario, boots, requests)
    study = _Study(scenario, source, launcher_for(scenario, source, launcher), size, out_dir, progress)
    try:
        study.run()
    finally:
        summary = study.close(report=report)
    assert study.run_dir is not None
    return ColdBootResult(study.run_dir, study.status, summary)
