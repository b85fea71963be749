"""Build the report object (the dict written as ``report.json``) from a loaded run folder.

Pure: ``RunData`` in, a ``reports.model.report.Report`` out (docs/design.md contract), each piece typed by
the module that computes it. Shape, for one canary or many:
``canaries: [{"id", "verdict", "reference", "overall", "levels", "forks"}]`` always; with exactly
one canary its ``reference``/``overall``/``levels``/``forks``/``verdict`` are also copied to the top
level, so tools written against the single-canary contract keep working. Readers (``check``,
``compare``) always go through ``canaries``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectors.read.runfolder import CanaryColumns, FileRead, RunData
from loadgen.core.claims import DEFAULT_MAX_RATE
from loadgen.core.manifest import Manifest, RunStatus
from loadgen.core.prepared import PreparedRun
from loadgen.core.wire.server_config import describe
from reports.analysis import (
    client_load,
    coresidency,
    cost,
    level_load,
    offload_check,
    provenance,
    seed_contracts,
    sides,
    sides_notes,
)
from reports.analysis.cache_checks import cache_expectations, cache_notices
from reports.analysis.cache_fields import cache_field_notices
from reports.analysis.canary import ClaimRule, analyse, latency
from reports.analysis.health import figures_notice, run_health
from reports.analysis.kv_effect import kv_effect
from reports.analysis.rescore import rescore_check
from reports.analysis.steps import TraceJoin, trace_join, trace_keys
from reports.model.engine_steps import EngineTrace
from reports.model.finite import scrub
from reports.model.report import (
    REPORT_SCHEMA,
    BackgroundLevel,
    CacheExpectation,
    Canary,
    CanaryAnalysis,
    InputFile,
    Report,
    RunSection,
    ScenarioChecks,
    ServerConfig,
)

ACTIVE = (RunStatus.PREPARED, RunStatus.RUNNING)  # a manifest still saying so when read: nobody ended it


def build_report(run: RunData) -> Report:
    trace = trace_of(run)
    cols = with_engine_join(run, trace)
    joined = _has_samples(run) and cols.n > 0
    m = run.manifest
    loaded = run.prepared.loaded_side if run.servers else None
    kv = provenance.of_run(run)
    analysed = analyse(cols, list(m.levels), claim_rule(m, run.prepared), loaded, trace, kv) if cols.n else []
    background = background_section(run.background)
    for entry in analysed:
        mark_unmeasured(entry, background, m)
    canaries: list[Canary] = [{**entry, "verdict": verdict(entry)} for entry in analysed]
    expectations = cache_expectations(
        run.canaries.frame,
        m.scenario,
        engine_t=run.engine_t,
        engine_queries=run.engine_prefix_queries,
        engine_hits=run.engine_prefix_hits,
    )
    report: Report = {
        "schema": REPORT_SCHEMA,
        "run": run_section(m, run.prepared),
        "input": {
            "files": [input_file(f) for f in run.files + run.background_files],
            "records": sum(f.records for f in run.files),
            "skipped_lines": run.skipped_lines,
            "engine_running_joined": joined,
        },
        "canaries": canaries,
        "background": background,
        "scenario_checks": scenario_checks(run, canaries, expectations),
    }
    settings = report["run"]["server_config"]
    report["run"]["notices"] += cache_notices(
        expectations,
        engine=(m.engine_metrics or {}).get("engine"),
        cached_tokens_reported=settings.get("cached_tokens_reported"),
    )
    report["run"]["notices"] += provenance.provenance_notices(canaries) + cache_field_notices(run.canaries.frame, kv)
    if cols.n and (effect := kv_effect(cols, kv.label)):
        report["kv_effect"] = effect
    if (offload := offload_check.of_run(run)) is not None:
        report["run"]["kv_offload"] = offload
        report["run"]["notices"] += offload_check.notices(offload)
    if cols.n:
        measured = coresidency.measure(cols.frame)
        report["run"]["notices"] += coresidency.notices(cols.frame, measured, joined, m.engine_metrics)
        unmeasured = sides_notes.x_axis_unmeasured(
            m,
            run.prepared.servers,
            joined,
            run.servers,
            int((measured.source == coresidency.TRUTH).sum()),
            int(((measured.source == coresidency.CLIENT) & (cols.frame["phase"].to_numpy() == "sweep")).sum()),
        )
        report["run"]["notices"] += [unmeasured] if unmeasured else []
        if run.servers:
            report["run"]["servers"] = sides_notes.run_servers(m, run.servers)
            report["run"]["x_axis_unmeasured"] = unmeasured
            report["run"]["notices"] += sides_notes.notices(cols.frame, run.prepared.servers)
        elif unmeasured:
            report["run"]["x_axis_unmeasured"] = unmeasured
        if not run.servers:  # behind a router each side has its own gauge (co_residency_sides)
            interval = (m.engine_metrics or {}).get("interval_s")
            report["run"]["witness"] = coresidency.witness(
                cols.frame,
                measured,
                run.engine_t,
                run.engine_running,
                scrape_interval_s=float(interval) if isinstance(interval, int | float) and interval > 0 else None,
                refresh_steps=settings.get("metrics_refresh_steps"),
            )
    if trace is not None:
        report["run"]["engine_trace"] = engine_trace_section(trace, cols.frame)
        report["run"]["notices"] += engine_trace_notices(report["run"]["engine_trace"])
    # the load processes' own CPU per level; absent for runs from before the samples
    if run.client_cpu:
        report["client_load"] = client_load.section(run.client_cpu)
        report["run"]["notices"] += client_load.notices(report["client_load"]["levels"])
    if (contracts := seed_contracts.section(cols, m.scenario, canaries)) is not None:
        report["seed_contracts"] = contracts
    if run.rescores is not None and (checked := rescore_check(run.rescores.records, run.rescores.files)) is not None:
        report["rescore"] = checked  # the re-score check (reports.analysis.rescore)
        report["run"]["notices"] += checked["notices"]
    report["health"] = run_health(run, canaries)
    report["run"]["notices"] += report["health"]["notices"]
    if len(canaries) == 1:
        only = canaries[0]
        report["verdict"] = only["verdict"]
        report["reference"] = only["reference"]
        report["overall"] = only["overall"]
        report["levels"] = only["levels"]
        report["forks"] = only["forks"]
    report, non_finite = scrub(report)  # a broken number never stops the report: its figure is null
    report["health"]["non_finite_figures"] = non_finite
    report["run"]["notices"] += figures_notice(non_finite)
    return report


def input_file(f: FileRead) -> InputFile:
    """What was read from one file; ``malformed_lines`` only where records were skipped as malformed."""
    out: InputFile = {
        "name": f.name,
        "records": f.records,
        "skipped_lines": f.skipped,
        "skipped_line_numbers": f.skipped_lines,
    }
    if f.malformed:
        out["malformed_lines"] = {str(n): why for n, why in sorted(f.malformed.items())}
    return out


def claim_rule(m: Manifest, prepared: PreparedRun) -> ClaimRule:
    """How each level's ``claim`` is judged: at the run's P, else at ``DEFAULT_MAX_RATE`` to say what a
    claim would have needed."""
    asked = prepared.claim_max_rate
    return ClaimRule(
        max_rate=asked if asked is not None else DEFAULT_MAX_RATE,
        asked=asked is not None,
        planned=m.canaries_per_level,
        ended_early=frozenset(lv for e in m.levels_ended_by_claim if (lv := e.get("level")) is not None),
    )


def run_notices(m: Manifest, prepared: PreparedRun) -> list[str]:
    """What went wrong with the run itself (not the endpoint's answers), from the manifest, in plain words."""
    notices = []
    if not (m.run_status and m.run_status.completed):  # endpoint_failed, finished_with_losses: reports.analysis.health
        cut = " and was cut short: its process died before it could end the run" if m.run_status in ACTIVE else ""
        notices.append(f"The run did not finish (status {str(m.status)!r}){cut}: figures cover what was collected.")
    if m.workers_vanished:
        names = ", ".join(map(str, m.workers_vanished))
        notices.append(f"Worker(s) {names} vanished during the run; their records up to that moment are included.")
    if m.unsettled_levels:
        levels = ", ".join(map(str, m.unsettled_levels))
        notices.append(f"Level(s) {levels}: canaries went out before every background user had a request in flight.")
    if m.levels_ended_by_claim:
        levels = ", ".join(str(e.get("level")) for e in m.levels_ended_by_claim)
        notices.append(
            f"Level(s) {levels} ended early by the claim rule (--claim-max-rate {prepared.claim_max_rate}): a canary "
            "diverged from the baseline reference, so the claim could no longer hold there; such a level is "
            "complete, not unfinished."
        )
    notices.extend(str(n) for n in m.notices)
    return notices


def run_section(m: Manifest, prepared: PreparedRun) -> RunSection:
    return {
        "id": m.run_id,
        "endpoint": m.endpoint.base_url,
        "endpoint_kind": m.endpoint.kind,
        "stream": m.endpoint.stream,
        "model": m.endpoint.model,
        "server_version": m.server.get("version"),
        "server_config": server_config(m),
        "labels": dict(m.labels),
        "started": m.started,
        "finished": m.finished,
        "status": None if m.status is None else str(m.status),
        "tool_version": m.tool.get("version"),
        "levels": m.levels,
        "canaries_per_level": m.canaries_per_level,
        "background_phase": prepared.background_phase,
        "claim_max_rate": prepared.claim_max_rate,
        "levels_ended_by_claim": list(m.levels_ended_by_claim),
        "notices": run_notices(m, prepared),
        "scenario_path": m.scenario_path,
    }


def server_config(m: Manifest) -> ServerConfig:
    """The settings the server stated about itself at the probe (``loadgen.core.wire.server_config``), and a line
    saying them; empty settings for runs that predate it."""
    settings = m.server.get("config", {}).get("settings", {})
    return {**settings, "summary": describe(dict(settings))}


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"


def mark_unmeasured(entry: CanaryAnalysis, background: list[BackgroundLevel] | None, m: Manifest) -> None:
    """Each sweep level's ``not_measured``: why its load was not there (``reports.analysis.level_load``), or None."""
    by_level = {b["concurrency"]: b for b in background or []}
    ended = {e.get("level"): e for e in m.levels_ended_by_background}
    for lv in entry["levels"]:
        lv["not_measured"] = level_load.not_measured(lv, by_level.get(lv["concurrency"]), ended.get(lv["concurrency"]))


def verdict(entry: CanaryAnalysis) -> str:
    o, ref = entry["overall"], entry["reference"]
    unit = ref.get("unit", "token")
    if not o["completions"]:  # nothing to compare: no count of completions, no verdict on divergence
        failed = f": all {_n(o['canaries'], 'canary', 'canaries')} of the sweep failed" if o["errors"] else ""
        parts = [f"no completions{failed}; no verdict"]
    else:
        # one count: the sweep's canaries, of which some completed and some failed (never "over 0 canaries")
        parts = [f"{_n(o['unique_completions'], 'unique completion')} over {_n(o['canaries'], 'canary', 'canaries')}"]
        if o["errors"]:
            parts[0] += f" ({o['errors']} failed)"
        ed = o["earliest_divergence"]
        if ed is not None:
            parts.append(f"earliest divergence at {unit} {ed}")
        else:
            referred = ref.get("request_id") is not None
            parts.append("no divergence from the reference" if referred else "no reference to compare with")
    fc = o.get("first_divergent_concurrency")
    if fc is not None:
        parts.append(f"divergence first seen at concurrency {fc}")
    if ref.get("self_consistent") is False:
        parts.append(f"baseline disagrees with itself ({ref['unique_completions']} unique)")
    if unmeasured := level_load.unmeasured_levels(entry["levels"]):
        s = "s" if len(unmeasured) > 1 else ""
        parts.append(f"level{s} {', '.join(map(str, unmeasured))} not measured (the load was not there)")
    return "; ".join(parts)


def _has_samples(run: RunData) -> bool:
    """The run holds ``/metrics`` samples with a running count: the endpoint (or a server behind it) serves them."""
    if any(np.isfinite(s.running).any() for s in run.servers):
        return True
    return run.engine_t is not None and run.engine_running is not None and bool(np.isfinite(run.engine_running).any())


def trace_of(run: RunData) -> TraceJoin | None:
    """The run's engine step trace met with its canary records (``reports.analysis.steps``), or None without one."""
    if run.steps is None:
        return None
    cols = run.canaries
    width = max(cols.token_ids.shape[1], cols.logprobs.shape[1])
    frame = cols.frame
    keys = trace_keys(run.steps, frame["request_id"].to_numpy(dtype=object), frame["answer_id"].to_numpy(dtype=object))
    return trace_join(run.steps, keys, width)


def engine_trace_section(trace: TraceJoin, frame: Any) -> EngineTrace:
    return {
        "files": [
            {
                "name": f.name,
                "source": f.source,
                "steps": f.steps,
                "skipped": f.skipped,
                "malformed": {str(k): v for k, v in f.malformed.items()},
            }
            for f in trace.table.files
        ],
        "steps": trace.table.steps,
        "records_joined": len(trace.records.records),
        "gauge_vs_trace": coresidency.gauge_vs_trace(frame),
    }


def engine_trace_notices(section: EngineTrace) -> list[str]:
    """What a reader of the trace must know: steps it could not use, no record it could join, the gauge's error."""
    out = [
        f"engine trace {f['name']}: {_n(f['skipped'], 'line')} skipped"
        + (f" (line {next(iter(f['malformed']))}: {next(iter(f['malformed'].values()))})" if f["malformed"] else "")
        for f in section["files"]
        if f["skipped"]
    ]
    if section["steps"] and not section["records_joined"]:
        out.append(
            "engine trace: no step names a canary record's request id or its answer's id (was X-Request-Id passed "
            "to the engine, and is the trace from this run?)"
        )
    gap = section["gauge_vs_trace"]
    if gap is not None and gap["max_abs_difference"]:
        out.append(
            f"the /metrics running gauge read {gap['median_difference']:+g} others (median; at most "
            f"{gap['max_abs_difference']:g}) against the engine trace over {_n(gap['canaries'], 'canary', 'canaries')}"
        )
    return out


def with_engine_join(run: RunData, trace: TraceJoin | None = None) -> CanaryColumns:
    """The canary columns plus the engine's running gauge joined over each canary's lifetime
    (``reports.analysis.coresidency.join_engine``), or, for a run with servers behind its endpoint, each side's over
    its part of the life (``reports.analysis.sides.join_sides``), and the client's own count of its requests in flight
    (``reports.analysis.coresidency.join_client``): computed here, at report time, never stored in the records."""
    cols = run.canaries
    scraped = [s.get("engine_metrics") or {} for s in run.manifest.servers] or [run.manifest.engine_metrics or {}]
    interval = next((i for x in scraped if isinstance(i := x.get("interval_s"), int | float) and i > 0), None)
    edge = float(interval) if interval is not None else 0.05
    if run.servers:
        frame = sides.join_sides(cols.frame, run.servers, run.prepared.loaded_side, edge_s=edge)
    else:
        frame = coresidency.join_engine(cols.frame, run.engine_t, run.engine_running, edge_s=edge)
    frame = coresidency.join_client(frame, run.background)
    if trace is not None:
        frame = frame.assign(**dict(zip(coresidency.TRACE_OTHERS, trace.others(len(frame)), strict=True)))
    return CanaryColumns(frame, cols.token_ids, cols.token_codes, cols.vocab, cols.logprobs, cols.top_gap)


def _sum_or_none(values: Any) -> float | None:
    """The sum of the counts the server reported; None where it reported none (not a count of zero)."""
    known = values[~np.isnan(values)]
    return float(known.sum()) if known.size else None


def background_section(bg: Any) -> list[BackgroundLevel] | None:
    """Per level the background requests sent (``bg``: the background rows' frame), their errors, latency
    and throughput (``reports.analysis.cost.throughput``); None for a run without background rows."""
    if bg is None:
        return None
    out: list[BackgroundLevel] = []
    for level, group in bg.groupby("level", dropna=False, sort=True):
        ok = group["status"].to_numpy() == "ok"
        out.append(
            {
                "concurrency": None if np.isnan(level) else int(level),
                "requests": len(group),
                "errors": int((~ok).sum()),
                "latency_s": latency(group["latency_s"].to_numpy()[ok]),
                "completion_tokens": _sum_or_none(group["completion_tokens"].to_numpy(dtype=float)),
                **cost.throughput(
                    group["sent_at"].to_numpy(dtype=float),
                    group["latency_s"].to_numpy(dtype=float),
                    ok,
                    group["completion_tokens"].to_numpy(dtype=float),
                ),
            }
        )
    return out


def scenario_checks(run: RunData, canaries: list[Canary], expectations: dict[str, CacheExpectation]) -> ScenarioChecks:
    f = run.canaries.frame
    live = f[f["phase"] != "warmup"]
    temps = live["temperature"].dropna().to_numpy()
    finish = live[live["status"] == "ok"]["finish_reason"].fillna("null").value_counts()
    bodies = live.groupby("canary_id")["request_key"].nunique()
    return {
        "temperature_zero": None if temps.size == 0 else bool((temps == 0).all()),
        "distinct_request_bodies": {str(k): int(v) for k, v in bodies.items()},
        "finish_reasons": {str(k): int(v) for k, v in finish.items()},
        "baseline_present": {e["id"]: e["reference"]["kind"] == "baseline" for e in canaries},
        "baseline_self_consistent": {e["id"]: e["reference"]["self_consistent"] for e in canaries},
        "run_finished": run.manifest.status == RunStatus.FINISHED and run.manifest.finished is not None,
        "skipped_lines": run.skipped_lines,
        "cache_expectations": expectations,
    }
