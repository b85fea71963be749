"""Markdown rendering of a finished report: short enough for a CI log or a pull-request comment.

Consumes the report only (``reports.model.report.Report``; no analysis, no I/O). Every string that came from
a server, a file or a user goes through ``reports.render.mdtext``: tokens as code spans, everything else
(model id, endpoint, verdicts, notices) as escaped prose, control characters written visibly, so
none of it can break the table, inject markup or reach a terminal raw.
"""

from __future__ import annotations

import math

from reports.model.coresidency import CoResidencyGroup
from reports.model.report import Canary, Figures, Fork, ForkClass, ForkMethod, Level, Report
from reports.render.cells import ci, fmt, held, level_cells, others, pct, rate_cell
from reports.render.mdtext import code, text
from reports.render.provenance import kv_effect_md, provenance_md
from reports.render.rescore import rescore_md
from reports.render.seeds import sampled_forks, seeds_md
from reports.render.sides import sides_md
from reports.render.steps import steps_md

__all__ = [
    "FORK_CLASSES",
    "ci",
    "code",
    "fmt",
    "fork_count",
    "fork_rule",
    "held",
    "level_cells",
    "levels_table",
    "others",
    "pct",
    "rate_cell",
    "render_markdown",
    "text",
]
FORK_CLASSES: tuple[ForkClass, ...] = ("near_tie", "structural", "unclassified")  # reports.analysis.forks.CLASSES


def levels_table(levels: list[Level]) -> list[str]:
    rows = [
        "| concurrency | canaries | errors | unique | diverged | rate (95% CI) | first div. min/med/max | drift max | "
        "bitwise eq. | others min/med/max | held throughout | at level |",
        "|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for lv in levels:
        fd = lv["first_divergence"]
        cells = level_cells(lv)
        fd_txt = "—" if fd is None else f"{fd['min']}/{fmt(fd['median'])}/{fd['max']}"
        rows.append(
            f"| {lv['concurrency']} | {lv['canaries']} | {lv['errors']} | {lv['unique_completions']} | "
            f"{fmt(lv['diverged'])} | {cells['rate']} | {fd_txt} | {cells['drift_max']} | {cells['bitwise']} | "
            f"{cells['others']} | {cells['held_throughout']} | {cells['at_level']} |"
        )
    return rows


def unmeasured_lines(levels: list[Level]) -> list[str]:
    """Below a levels table: why each level that gives no verdict does not (``Level.not_measured``)."""
    return [f"Level {lv['concurrency']} not measured: {lv['not_measured']}." for lv in levels if lv.get("not_measured")]


def _forks(forks: list[Fork], limit: int = 10) -> list[str]:
    if not forks:
        return ["No forks: every completion matched the reference."]
    rows = [
        "| position | reference token | other token | canaries | top1−top2 gap | gap (steps) | class | "
        "first at concurrency |"
    ]
    rows.append("|---:|---|---|---:|---:|---:|---|---:|")
    for f in forks[:limit]:
        rows.append(
            f"| {f['position']} | {code(f['reference_token'])} | {code(f['other_token'])} | {f['count']} | "
            f"{fmt(f['top1_top2_gap'])} | {fmt(f.get('gap_steps'))} | {text(f.get('class'))} | "
            f"{f['first_seen_concurrency']} |"
        )
    if len(forks) > limit:
        rows.append(f"\n…and {len(forks) - limit} more forks in report.json.")
    return rows


def canary_section(entry: Canary, heading: str, sampled: str | None = None) -> list[str]:
    """``sampled``: a sampled canary's fork classes (``reports.render.seeds.sampled_forks``), said instead of the
    near-tie table."""
    ref = entry["reference"]
    lines = [f"{heading} Canary {code(str(entry['id']))}", "", f"**{text(entry['verdict'])}**", ""]
    kind = "the baseline (sent alone before the sweep)" if ref["kind"] == "baseline" else "the modal completion"
    lines.append(f"Reference: {kind}, compared by {ref['identity'].replace('_', ' ')}; length {fmt(ref['length'])}.")
    if ref.get("identity_note"):
        lines.append(f"Note: {text(ref['identity_note'])}.")
    if ref.get("self_consistent") is False:
        lines.append(
            f"⚠️ The baseline disagrees with itself: {ref['unique_completions']} unique completions over "
            f"{ref['completions']} baseline canaries (earliest divergence {fmt(ref['earliest_divergence'])})."
        )
    lines += ["", *levels_table(entry["levels"]), ""]
    if unmeasured := unmeasured_lines(entry["levels"]):
        lines += [*unmeasured, ""]
    lines += [*_forks(entry["forks"]), ""]
    lines += [text(sampled), ""] if sampled else _fork_classes(entry)
    sides = entry.get("sides")
    lines += sides_md(sides) if sides else _co_residency_table(entry.get("by_co_residency"))
    lines += steps_md(entry.get("engine_steps"))
    lines += provenance_md(entry.get("provenance"))
    lines += claim_lines(entry)
    return lines


def claim_heading(entry: Canary) -> str | None:
    """The claim's one-line summary (``loadgen.core.claims``); None for a report from before claims."""
    claims = [lv["claim"] for lv in entry.get("levels") or [] if lv.get("claim")]
    if not claims:
        return None
    c = claims[0]
    p, n, r3 = c["max_rate"], c["needed"], c["rule_of_three"]
    need = f"{n} clean canaries per level (exact binomial; rule of three 3/P: {r3})"
    if not c["asked"]:
        return f"Claim 'divergence rate < {p:g} at 95%' (not asked for; --claim-max-rate P): would need {need}."
    held = [str(lv["concurrency"]) for lv in entry["levels"] if "claim" in lv and lv["claim"]["holds"]]
    return f"Claim 'divergence rate < {p:g} at 95%' (--claim-max-rate {p:g}) needs {need}; holds at " + (
        f"concurrency {', '.join(held)}." if held else "no level."
    )


def claim_lines(entry: Canary) -> list[str]:
    """Per level: does the claim hold, the 95% upper bound of the divergence rate, and why."""
    head = claim_heading(entry)
    if head is None:
        return []
    out = [head, "", "| concurrency | claim | completions | diverged | 95% upper bound |", "|---:|---|---:|---:|---:|"]
    for lv in entry["levels"]:
        c = lv["claim"]
        early = " (ended early)" if c["ended_early"] else ""
        out.append(
            f"| {lv['concurrency']} | {c['status'].replace('_', ' ')}{early} | {c['completions']} | "
            f"{fmt(c['diverged'])} | {fmt(c['upper_bound'])} |"
        )
    return [*out, ""]


def fork_rule(gaps: ForkMethod | None) -> str:
    """How near-tie flips were told from structural divergences (``report.json`` ``fork_gaps``), in words."""
    rel, k = (None, None) if gaps is None else (gaps.get("relative_step"), gaps.get("near_tie_steps"))
    if not isinstance(rel, int | float) or not isinstance(k, int | float) or rel <= 0:
        return "Forks: near-tie flips versus structural divergences."
    return (
        f"Near-tie flip: the reference's top-1 − top-2 gap at the fork is at most {k:g} rounding steps, a step "
        f"being 2^{math.log2(rel):g} of the logit magnitude, estimated as |top-1 logprob| + gap (the runner-up's "
        "logprob); structural: a larger gap (a clear winner changed); unclassified: no gap recorded there."
    )


def _fork_classes(entry: Canary) -> list[str]:
    if not entry.get("overall", {}).get("diverged"):  # nothing forked, or a report from before the classes
        return []
    out = [fork_rule(entry.get("fork_gaps")), ""]
    out += ["| concurrency | diverged | near-tie | structural | unclassified |", "|---:|---:|---:|---:|---:|"]
    for name, b in [("overall", entry["overall"]), *((str(lv["concurrency"]), lv) for lv in entry["levels"])]:
        counts = " | ".join(fmt(fork_count(b, k)) for k in FORK_CLASSES)
        out.append(f"| {name} | {fmt(b.get('diverged'))} | {counts} |")
    return [*out, ""]


def fork_count(block: Figures, name: ForkClass) -> int | None:
    """A level's (or ``overall``'s) divergent completions of one fork class; None without a reference, or in a
    report from before the classes."""
    classes = block.get("fork_classes")
    return None if classes is None else classes[name]


def _co_residency_table(rows: list[CoResidencyGroup] | None) -> list[str]:
    if not rows:
        return []
    out = [
        "Divergence by measured co-residency (other requests the engine ran beside each canary over its "
        "lifetime, per-canary median):",
        "",
        "| others | canaries | unique | diverged | earliest |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['others']} | {r['canaries']} | {r['unique_completions']} | {fmt(r['diverged'])} | "
            f"{fmt(r['earliest_divergence'])} |"
        )
    return [*out, ""]


def headline(report: Report) -> list[str]:
    """What must be read before any figure: the endpoint failed, records were lost (``reports.analysis.health``)."""
    health = report.get("health")
    return list(health.get("headline") or []) if isinstance(health, dict) else []


def phase_line(phase: str | None) -> str | None:
    """What the levels' background was when ``background.phase`` aimed it at one phase of each sweep canary
    (docs/design.md, "Background aimed at one phase"); None where it was held throughout."""
    if phase is None or phase == "all":
        return None
    said = f"(background.phase = {code(phase)})"
    if phase == "prefill":
        return (
            f"Background aimed at each sweep canary's prefill {said}: each background user sent one request, "
            "prefilled before the canary was sent, and none while it ran."
        )
    after = "its first token" if phase == "decode" else f"{phase.removeprefix('from:')} of its tokens"
    return (
        f"Background aimed at each sweep canary's decode {said}: sent only once the canary's stream showed {after}, "
        "none after it ended; each canary was sent with no background request in flight."
    )


def render_markdown(report: Report) -> str:
    run = report["run"]
    lines = [f"## Batch-invariance report: run {text(run.get('id'))}", ""]
    for line in headline(report):  # before any figure, each its own paragraph
        lines += [f"**{text(line)}**", ""]
    lines.append(f"Model {text(run.get('model'))} at {text(run.get('endpoint'))}; status {text(run.get('status'))}.")
    if run.get("labels"):
        lines.append("Labels: " + ", ".join(f"{code(k)}={code(v)}" for k, v in sorted(run["labels"].items())))
    if run.get("server_config", {}).get("summary"):
        lines.append(f"Server says: {text(run['server_config']['summary'])}.")
    if witness := run.get("witness"):
        lines.append(f"Witness: {text(witness['summary'])}.")
    if aimed := phase_line(run.get("background_phase")):
        lines.append(aimed)
    if client := report.get("client_load", {}).get("summary"):
        lines.append(f"{text(client)}.")
    lines += [f"> **Notice:** {text(n)}" for n in run.get("notices") or []]
    inp = report["input"]
    if inp["skipped_lines"]:
        lines.append(f"Skipped {inp['skipped_lines']} unreadable line(s) (torn or corrupt) while reading the run.")
    lines.append("")
    lines += kv_effect_md(report.get("kv_effect"))
    many = len(report["canaries"]) > 1
    for entry in report["canaries"]:
        sampled = sampled_forks(report.get("seed_contracts"), str(entry["id"]))
        lines += canary_section(entry, "###" if many else "####", sampled)
    if not report["canaries"]:
        lines.append("No canary records in this run.")
    lines += seeds_md(report.get("seed_contracts"))
    lines += rescore_md(report.get("rescore"))
    return "\n".join(lines) + "\n"
