"""The end of ``loadgen run`` on the terminal: each canary's verdict and per-level table, as report.md has them.

Why: after minutes of load a user wants the answer without opening a file; the words and the table
are report.md's own (``reports.render.md.levels_table``), so what the terminal says and what the
report says never differ. Read from the ``report.json`` the run just wrote; no report, no summary.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from loadgen.core.errors import visible
from loadgen.core.manifest import EndedByClaim
from reports.model.report import Report, is_report
from reports.render.md import claim_heading, levels_table, unmeasured_lines
from reports.render.provenance import proof_sentence, tier_line
from reports.render.seeds import seeds_summary


def summary_lines(report: Report) -> list[str]:
    """Verdict, blank line, per-level table, blank line, per canary (the id first when there are several); a
    prefill/decode run's sentence on which side's load the divergence follows; with an engine step trace, the
    factor the drift followed; where the canary asked for a KV path, whether it ran; the claim asked for
    (``--claim-max-rate``) and where it holds, and the levels its rule ended early; an offload tier that never
    ran; the seed contracts broken, or that they held; why the x-axis is unmeasured."""
    entries = report.get("canaries") or []
    lines: list[str] = []
    for entry in entries:
        verdict = str(entry["verdict"])
        lines += [f"{entry['id']}: {verdict}" if len(entries) > 1 else verdict, "", *levels_table(entry["levels"]), ""]
        if why := unmeasured_lines(entry["levels"]):
            lines += [*why, ""]
        sides = entry.get("sides")
        if sides and (follows := sides.get("follows")):
            lines += [follows["sentence"], ""]
        if steps := entry.get("engine_steps"):
            lines += [f"Why: {steps['sentence']}", ""]
        if (kv := entry.get("provenance")) and kv["asked"]:
            lines += [f"KV: {proof_sentence(kv)}", ""]
        asked = any(lv["claim"]["asked"] for lv in entry["levels"] if "claim" in lv)
        if asked and (claim := claim_heading(entry)):
            lines += [claim, ""]
    if ended := report["run"].get("levels_ended_by_claim"):
        lines += [_ended_by_claim(ended), ""]
    if tier := tier_line(report["run"].get("kv_offload")):
        lines += [tier, ""]
    if seeds := seeds_summary(report.get("seed_contracts")):
        lines += [*seeds, ""]
    if unmeasured := report["run"].get("x_axis_unmeasured"):
        lines += [f"Notice: {unmeasured}", ""]
    return [visible(line) for line in lines]


def _ended_by_claim(ended: list[EndedByClaim]) -> str:
    """The levels the claim rule ended before their quota, with what each had completed."""
    each = ", ".join(f"{e.get('level')} ({e.get('completed')} of {e.get('quota')} canaries)" for e in ended)
    return (
        f"Level{'s' if len(ended) > 1 else ''} {each} ended early by the claim rule: a canary diverged from the "
        "baseline reference, so the claim could no longer hold there."
    )


def read_summary(run_dir: Path) -> list[str]:
    """The summary of ``run_dir/report.json``; nothing when it is missing or unreadable (``--no-report``)."""
    report = read_report(run_dir)
    return [] if report is None else summary_lines(report)


def read_report(run_dir: Path) -> Report | None:
    """``run_dir/report.json``, or None when it is missing or unreadable (``--no-report``)."""
    try:
        report = orjson.loads((run_dir / "report.json").read_bytes())
        summary_lines(report)  # one that cannot be summarised is no report here
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
        return None
    return report if is_report(report) else None


def headline_of(report: Report | None) -> list[str]:
    """What the report says before any figure (the endpoint failed, records were lost): a web UI run's, which
    this process did not end itself."""
    health = report.get("health") if report is not None else None
    return [str(line) for line in health.get("headline") or []] if isinstance(health, dict) else []
