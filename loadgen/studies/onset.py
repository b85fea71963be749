"""``loadgen onset``: the lowest background level at which the canary diverges, found by an adaptive search.

Why: a sweep answers "how often, at these levels"; the onset asks "from which level on", and spends
canaries only on levels that narrow the answer. ``loadgen.studies.onset_search`` picks each level
(doubling from 1 up to ``max_level``, then bisection between the highest clean and the lowest
divergent level); this module makes each step a real run and writes ``onset.json``.

One real run per visited level (``loadgen.studies.run.run`` of a ``RunRequest`` with ``levels=(L,)``),
all against one endpoint: the engine is started once, here, when the scenario has no base URL, and every
run reuses it. Each run sends the scenario's warm-up and baseline before its level, so each level's
report has its own reference; the search accepts a level's verdict only when that reference (the modal
baseline completion, per canary) is self-consistent and identical, in the same identity, to the first
run's: every level is then judged against the same baseline completion. A run per level costs a baseline
per level, but keeps each level's evidence a complete, ordinary run folder (report, ``loadgen check``)
and makes a reference that moved between runs visible instead of silently mixing two baselines.

The rule (``RULE``): a level is **clean** when every canary sent at it answered and none diverged
from the reference; **divergent** when at least one diverged; otherwise (errors or a run that did
not finish, and no divergence) it is **inconclusive** and the search stops there. Zero divergences in
n canaries bound the level's divergence rate below 1 - 0.05^(1/n) (about 3/n) at 95% confidence.
The search assumes divergence is monotone in the level; a rarer divergence, or one at levels it did
not try, can hide below the onset it reports (``RISK``).

The search is keyed by what was **measured** (``MEASURED_RULE``, docs/design.md "The level's band"): the level
asked is what the background was told to hold, not what the canary ran beside. Each sweep canary of a judged run
is placed at its measured level (``reports.analysis.measured``: the report's own co-residency, the median of the other
requests beside it over its life, rounded, as ``by_co_residency`` groups it); a measured level is divergent when
any canary measured there diverged; ``onset_search.next_step`` asks for the measured level the bracket needs and
stops undecided when that level was asked already. ``onset_level`` is a measured level.

Raises ``LoadgenError`` subclasses for unusable input; prints nothing (``on_level`` is called after
each level, for the CLI's progress lines).

Why this length: the rule that judges a level (its reference check, each canary's measured level) and
``onset.json``, which records every judgement, are one rule stated once; split, the file's fields and the rule
that fills them would be read in two places.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd  # type: ignore[import-untyped]

from collectors.jsonl import read_jsonl
from loadgen.core.errors import ScenarioError, UsageError
from loadgen.core.manifest import EngineFacts, RunStatus, create_run_dir, now_iso
from loadgen.core.request import RunRequest
from loadgen.core.scenario.limits import MAX_LEVEL
from loadgen.core.stats import wilson
from loadgen.studies.events import Progress, no_progress
from loadgen.studies.onset_search import bracket, merge, next_level, next_step
from loadgen.studies.run import check_options, endpoint_for, keep_logs_in, run
from reports.analysis.measured import measured_records
from reports.model.report import Reference, Report
from reports.render.writer import load_report, report_json, write_text

SCHEMA = 1
T = TypeVar("T")
CLEAN, DIVERGENT, INCONCLUSIVE = "clean", "divergent", "inconclusive"
RULE = (
    "a level is clean when all {n} canaries sent at it (per canary of the scenario) answered and none diverged "
    "from the reference (the modal baseline completion, the same in every run); divergent when at least one "
    "diverged; otherwise inconclusive, and the search stops"
)
MEASURED_RULE = (
    "each sweep canary is placed at the level it was measured at (the median of the other requests beside it over "
    "its life, rounded, as report.json's by_co_residency groups it: the engine's batch sizes, else its /metrics "
    "gauge, else the client's own requests in flight); a measured level is divergent when any canary measured "
    "there diverged, clean when none did; the search asks for the measured level it needs, and stops undecided "
    "when that level was asked already (the endpoint did not hold it)"
)
RISK = (
    "the search assumes divergence is monotone in the level and tries only the levels it needs: a level called "
    "clean may still diverge at a rate below the bound, and levels below the onset that were never tried "
    "were not observed, so a rare divergence can hide below the onset found; confirm with "
    "`loadgen run --levels ... --canaries-per-level N` (more canaries) at the levels just below it"
)


def upper_bound_95(n: int) -> float:
    """The exact one-sided 95% upper bound on a rate after 0 events in n trials (about 3/n)."""
    return float(1.0 - 0.05 ** (1.0 / n))


def bound_line(result: OnsetResult) -> str:
    """What the levels found clean bound, in words: the rule's bound at each measured level found clean (from
    the fewest clean canaries of one canary measured at any of them), or that there is none (no measured level
    above 0 was clean; the baseline, level 0, is the reference and bounds nothing)."""
    counts = result.clean_counts()
    clean = sorted(level for level in counts if level > 0)
    if not clean:
        return "none: no level tried was clean (level 0 is the baseline the others are compared with, not a test)"
    n = min(counts[level] for level in clean)
    more = "" if all(counts[level] == n for level in clean) else "at least "
    which = f"level {clean[0]}" if len(clean) == 1 else f"levels {', '.join(map(str, clean))} (each)"
    return (
        f"{which}: 0 divergences in {more}{n} canaries per canary: its divergence rate is below "
        f"{upper_bound_95(n):.1%} at 95% confidence (about 3/n = {3.0 / n:.1%})"
    )


def rule_block(n: int) -> dict[str, Any]:
    return {
        "canaries_per_level": n,
        "clean": RULE.format(n=n),
        "measured": MEASURED_RULE,
        "upper_bound_95": round(upper_bound_95(n), 4),
        "upper_bound_95_rule_of_three": round(3.0 / n, 4),
        "statement": (
            f"0 divergences in {n} canaries: the level's divergence rate is below {upper_bound_95(n):.1%} "
            f"at 95% confidence (about 3/n = {3.0 / n:.1%})"
        ),
    }


@dataclass
class MeasuredCanary:
    """One sweep canary of a level asked: what it was measured to share the engine with, and whether it diverged
    (``reports.analysis.measured``); ``measured_level`` None: not measured, ``diverged`` None: failed or not
    compared."""

    request_id: str
    canary_id: str
    others_min: float | None
    others_median: float | None
    others_max: float | None
    source: str | None
    measured_level: int | None
    diverged: bool | None


@dataclass
class LevelResult:
    level: int  # the level asked: background requests the run was told to hold
    verdict: str  # clean, divergent or inconclusive
    run_dir: Path
    status: str  # the run's final status
    canaries: int  # sweep canaries sent at the level, every canary of the scenario
    completions: int
    errors: int
    diverged: int
    sent: int  # every canary request of the run: warm-up and baseline included
    earliest_divergence: int | None = None
    divergence_rate_ci95: list[float] | None = None  # Wilson, pooled over the scenario's canaries
    co_residency_min: float | None = None  # fewest other requests the engine measured beside a canary
    not_held: int | None = None  # canaries measured to share the engine with fewer than the level
    reason: str | None = None  # why inconclusive
    measured: list[MeasuredCanary] = field(default_factory=list)  # each sweep canary, in send order

    @property
    def measured_levels(self) -> dict[int, bool]:
        """This level's canaries by measured level: True where one measured there diverged (unmeasured and
        uncompared canaries left out)."""
        return merge({}, (k for m in self.measured if (k := _keyed(m)) is not None))


def _keyed(m: MeasuredCanary) -> tuple[int, bool] | None:
    """A canary's place in the search: (measured level, diverged); None where it was not measured or compared."""
    return None if m.measured_level is None or m.diverged is None else (m.measured_level, m.diverged)


@dataclass
class OnsetResult:
    out_dir: Path
    max_level: int
    canaries_per_level: int
    levels: list[LevelResult] = field(default_factory=list)
    stopped: str | None = None  # why the search ended before deciding

    @property
    def results(self) -> dict[int, bool]:
        """Measured level -> diverged, over every judged level's canaries (``onset_search.merge``)."""
        out: dict[int, bool] = {}
        for r in self.levels:
            if r.verdict != INCONCLUSIVE:
                out = merge(out, r.measured_levels.items())
        return out

    @property
    def asked(self) -> dict[int, list[int]]:
        """Level asked -> the measured levels of its canaries."""
        return {r.level: [m.measured_level for m in r.measured if m.measured_level is not None] for r in self.levels}

    def clean_counts(self) -> dict[int, int]:
        """Measured level found clean -> the fewest clean canaries of one canary id measured there."""
        results = self.results
        per: dict[tuple[int, str], int] = {}
        for r in self.levels:
            if r.verdict == INCONCLUSIVE:
                continue
            for m in r.measured:
                if (k := _keyed(m)) is not None and results.get(k[0]) is False:
                    per[k[0], m.canary_id] = per.get((k[0], m.canary_id), 0) + 1
        out: dict[int, int] = {}
        for (level, _), count in per.items():
            out[level] = min(out.get(level, count), count)
        return out

    @property
    def decided(self) -> bool:
        return self.stopped is None and next_level(self.max_level, self.results) is None

    @property
    def onset_level(self) -> int | None:
        return bracket(self.results).lowest_divergent if self.decided else None

    @property
    def highest_clean_level(self) -> int:
        return bracket(self.results).highest_clean


def check_onset_options(max_level: int) -> None:
    if not 1 <= max_level <= MAX_LEVEL:
        raise UsageError(f"--max-level {max_level}: expected 1..{MAX_LEVEL} background requests")


def _reference(run_dir: Path, block: Reference) -> tuple[str, Any] | None:
    """The reference completion of one canary of a run, in the identity its report compared by."""
    request_id, kind = block.get("request_id"), block.get("identity")
    if request_id is None or kind is None:
        return None
    column = {"token_ids": "token_ids", "tokens": "tokens", "text": "text"}.get(str(kind))
    for path in sorted(run_dir.glob("canaries*.jsonl")):
        for row in read_jsonl(path).rows:
            if row.get("request_id") == request_id:
                return str(kind), row.get(column) if column else None
    return None


def judge(
    level: int,
    run_dir: Path,
    status: str,
    report: Report,
    n: int,
    references: dict[str, tuple[str, Any] | None],
    first: dict[str, tuple[str, Any] | None] | None,
) -> LevelResult:
    """One level's verdict by ``RULE``, from its run's report; ``references`` are this run's reference
    completions, ``first`` the first run's (None: this is the first run)."""
    canaries = report.get("canaries", [])
    # each canary's figures at the level; None where the run has none there
    at = [next((e for e in c.get("levels", []) if e.get("concurrency") == level), None) for c in canaries]
    found = [e for e in at if e is not None]
    count = sum(int(e.get("canaries") or 0) for e in found)
    completions = sum(int(e.get("completions") or 0) for e in found)
    errors = sum(int(e.get("errors") or 0) for e in found)
    diverged = sum(int(e.get("diverged") or 0) for e in found)
    earliest = [d for e in found if (d := e.get("earliest_divergence")) is not None]
    co = [c for e in found if (c := e.get("co_residency")) is not None]
    co_min = [m for c in co if (m := c.get("min")) is not None]
    result = LevelResult(
        level=level,
        verdict=INCONCLUSIVE,
        run_dir=run_dir,
        status=status,
        canaries=count,
        completions=completions,
        errors=errors,
        diverged=diverged,
        sent=int(report.get("input", {}).get("records") or 0),
        earliest_divergence=min(earliest) if earliest else None,
        divergence_rate_ci95=_pooled_ci(diverged, completions),
        co_residency_min=min(co_min) if co_min else None,
        not_held=sum(int(c.get("not_held") or 0) for c in co) if at else None,
    )
    problems = []
    for canary in canaries:
        cid, ref = canary.get("id"), canary.get("reference", {})
        if ref.get("kind") != "baseline":
            problems.append(f"canary {cid}: no baseline reference")
        elif ref.get("self_consistent") is False:
            problems.append(f"canary {cid}: the baseline disagrees with itself alone")
        elif references.get(str(cid)) is None:
            problems.append(f"canary {cid}: the reference completion is not in the records")
        elif first is not None and references.get(str(cid)) != first.get(str(cid)):
            problems.append(f"canary {cid}: the reference differs from the first run's")
    if not canaries:
        problems.append("the report has no canaries")
    if problems:
        result.reason = "; ".join(problems)  # not judged against the same baseline: no verdict
    elif diverged > 0:
        result.verdict = DIVERGENT
    elif status != RunStatus.FINISHED:
        result.reason = f"the run ended {status}"
    elif errors or any(e is None or int(e.get("completions") or 0) < n for e in at):
        result.reason = f"{errors} errors, {completions} of {n * len(at)} canaries answered, none diverged"
    else:
        result.verdict = CLEAN
    return result


def _pooled_ci(diverged: int, completions: int) -> list[float] | None:
    ci = wilson(diverged, completions)
    return None if ci is None else [round(ci[0], 4), round(ci[1], 4)]


def onset(
    scenario_path: Path,
    *,
    host: str | None = None,
    max_level: int = 32,
    out_dir: Path = Path("runs"),
    canaries_per_level: int | None = None,
    labels: dict[str, str] | None = None,
    engine_args: list[str] | None = None,
    on_level: Callable[[LevelResult], None] | None = None,
    progress: Progress = no_progress,
) -> OnsetResult:
    """Search the onset; each visited level is a run folder under ``<study>/level-<L>/``, and
    ``<study>/onset.json`` is rewritten after every level (a killed search keeps what it found). ``progress``
    hears the engine start and each level's run (``loadgen.studies.events``), as ``loadgen run``'s does."""
    check_onset_options(max_level)
    check_options(out_dir, 0)
    source = str(scenario_path)
    scenario = RunRequest(
        scenario_path, host=host, canaries_per_level=canaries_per_level, labels=labels or {}
    ).scenario()
    if scenario.sweep.baseline < 1:
        raise ScenarioError(f"{source}: field sweep.baseline: the onset search needs a baseline (>= 1) as reference")
    if scenario.sweep.burst:
        raise ScenarioError(f"{source}: field sweep.burst: the onset search holds background levels; set burst = 0")
    n = scenario.sweep.canaries_per_level
    started = now_iso()
    # the study folder is made once the engine answers: an engine that refuses to start leaves no empty one
    started_here = endpoint_for(scenario, engine_args or [], log_dir=out_dir, progress=progress)
    with started_here as (scenario, engine, engine_info):
        assert scenario.endpoint.base_url is not None
        study = create_run_dir(out_dir, f"{scenario.name}-onset")
        result = OnsetResult(study, max_level, n)
        keep_logs_in(engine, study)
        first: dict[str, tuple[str, Any] | None] | None = None
        while (step := next_step(max_level, result.results, result.asked)).level is not None:
            level = step.level
            at_level = RunRequest(
                scenario_path,
                host=scenario.endpoint.base_url,
                out_dir=study / f"level-{level}",
                levels=(level,),
                canaries_per_level=n,
                labels={**scenario.labels, "onset_study": study.name},
                servers=tuple(scenario.endpoint.servers) or None,
            )
            ran = run(at_level, progress=progress)
            report = load_report(ran.run_dir / "report.json")
            refs = {str(c.get("id")): _reference(ran.run_dir, c["reference"]) for c in report["canaries"]}
            status = str(ran.status) if ran.status is not None else "unknown"
            level_result = judge(level, ran.run_dir, status, report, n, refs, first)
            level_result.measured = measured_canaries(ran.run_dir, level)
            if level_result.verdict != INCONCLUSIVE and not level_result.measured_levels:
                level_result.verdict = INCONCLUSIVE
                level_result.reason = "no canary's co-residency was measured (no engine figure, no client count)"
            if first is None and level_result.reason is None:
                first = refs
            result.levels.append(level_result)
            if level_result.verdict == INCONCLUSIVE:
                result.stopped = f"level {level} inconclusive: {level_result.reason}"
            elif (after := next_step(max_level, result.results, result.asked)).stopped:
                result.stopped = after.stopped
            _write(result, scenario_path, scenario.name, scenario.endpoint.base_url, started, engine_info)
            if on_level is not None:
                on_level(level_result)
            if result.stopped:
                break
    return result


def measured_canaries(run_dir: Path, level: int) -> list[MeasuredCanary]:
    """The sweep canaries a run sent at ``level``, as the report measured and compared them
    (``reports.analysis.measured``)."""
    df = measured_records(run_dir)
    rows = df[(df["phase"] == "sweep") & (df["level"] == level)]
    return [
        MeasuredCanary(
            request_id=str(r["request_id"]),
            canary_id=str(r["canary_id"]),
            others_min=_or_none(r["others_min"], float),
            others_median=_or_none(r["others_median"], float),
            others_max=_or_none(r["others_max"], float),
            source=_or_none(r["others_source"], str),
            measured_level=_or_none(r["measured_level"], int),
            diverged=_or_none(r["diverged"], bool),
        )
        for r in rows.to_dict("records")
    ]


def _or_none(value: Any, kind: Callable[[Any], T]) -> T | None:
    """A frame's cell as a plain value; None where it is missing (NaN, NA, None)."""
    return None if pd.isna(value) else kind(value)


def onset_json(
    result: OnsetResult, source: str, name: str, endpoint: str, started: str, engine: EngineFacts | None
) -> dict[str, Any]:
    def rel(path: Path) -> str:
        return str(path.relative_to(result.out_dir))

    def verdicts(results: dict[int, bool]) -> dict[str, str]:
        return {str(k): DIVERGENT if v else CLEAN for k, v in sorted(results.items())}

    levels = []
    for r in result.levels:
        d = asdict(r)
        d["run_dir"] = rel(r.run_dir)
        d["measured_levels"] = verdicts(r.measured_levels)  # this level's canaries, by the level they measured
        d["unmeasured"] = sum(m.measured_level is None for m in r.measured)
        levels.append(d)
    return {
        "schema": SCHEMA,
        "scenario": name,
        "scenario_path": source,
        "endpoint": endpoint,
        "engine": engine,
        "started": started,
        "updated": now_iso(),
        "max_level": result.max_level,
        "level_meaning": "levels_tried and each level's level: background requests asked for while the canary is "
        "sent; onset_level, highest_clean_level and results_by_measured_level: other requests each canary was "
        "measured beside (the median over its life, rounded; the canary itself not counted)",
        "onset_level": result.onset_level,
        "highest_clean_level": result.highest_clean_level,
        "decided": result.decided,
        "stopped": result.stopped,
        "levels_tried": [r.level for r in result.levels],
        "results_by_measured_level": verdicts(result.results),
        "canaries": sum(r.sent for r in result.levels),
        "sweep_canaries": sum(r.canaries for r in result.levels),
        "rule": rule_block(result.canaries_per_level),
        "risk": RISK,
        "search": "doubling from 1 (1, 2, 4, ... capped at max_level) until a measured level diverges, then "
        "bisection between the highest clean and the lowest divergent measured level, asking for the level needed; "
        "stopped undecided when that level was asked already",
        "runs": "one run per visited level against one endpoint; each run's baseline reference must equal the "
        "first run's, so every level is judged against the same baseline completion",
        "levels": levels,
        "run_dirs": [rel(r.run_dir) for r in result.levels],
    }


def _write(
    result: OnsetResult, source: Path, name: str, endpoint: str, started: str, engine: EngineFacts | None
) -> None:
    data = onset_json(result, str(source), name, endpoint, started, engine)
    write_text(result.out_dir / "onset.json", report_json(data))
