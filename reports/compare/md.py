"""``comparison.md``: runs side by side in tables that read in a terminal and on GitHub.

Why this shape: one table of metric x run columns grows to 17 columns for four runs and wraps beyond
reading. So runs are named by letter with a legend above; per canary, each metric gets a small table
(rows: overall and each level; one column per run, the delta against run A in parentheses), and the
cost table is long form (one row per level and run). A per-metric table that would still pass
``WIDTH`` columns (many runs) is written long form too, so no table line is wider than ``WIDTH``.
Pure: the comparison dict (``reports.compare.runs``) in, Markdown out; server text through ``mdtext``.
"""

from __future__ import annotations

from reports.compare.references import said as reference_sentences
from reports.model.comparison import ComparedCanary, Comparison, FigureName
from reports.render.compare_cells import (
    COST_COLUMNS,
    COST_NOTE,
    MD_METRICS,
    REFERENCE_NOTE,
    batch_invariance,
    cost_formats,
    delta,
    labels,
    level_blocks,
    run_letters,
    value,
    with_delta,
)
from reports.render.compare_kv import kv_md
from reports.render.mdtext import code, text

WIDTH = 100


def legend(cmp: Comparison) -> list[str]:
    out = []
    for letter, r in zip(labels(cmp), cmp["runs"], strict=True):
        tags = ", ".join(f"{k}={v}" for k, v in sorted((r.get("labels") or {}).items()))
        line = f"- **{letter}**: {code(r['name'])}, model {text(r['model'])}"
        line += f", batch-invariant {batch_invariance(r.get('batch_invariant'))}"
        line += f", labels {text(tags)}" if tags else ""
        line += f"; server says: {text(r['server'])}" if r.get("server") else ""
        out.append(line)
    return out


def metric_table(canary: ComparedCanary, key: FigureName, letters: list[str]) -> list[str]:
    """One metric: a column per run when that fits ``WIDTH``, else one row per level and run."""
    blocks = level_blocks(canary)
    wide = ["| concurrency | " + " | ".join(letters) + " |", "|---:|" + "---:|" * len(letters)]
    for b in blocks:
        cells = [with_delta(row, d, key, i == 0) for i, (row, d) in enumerate(zip(b["runs"], b["deltas"], strict=True))]
        wide.append(f"| {text(b['concurrency'])} | " + " | ".join(cells) + " |")
    if max(len(line) for line in wide) <= WIDTH:
        return wide
    long = [f"| concurrency | run | value | vs {letters[0]} |", "|---:|---|---:|---:|"]
    for b in blocks:
        for i, (letter, row, d) in enumerate(zip(letters, b["runs"], b["deltas"], strict=True)):
            change = delta(d, key, i == 0) or "·"
            long.append(f"| {text(b['concurrency'])} | {letter} | {value(row, key)} | {change} |")
    return long


def cost_table(cmp: Comparison, canary: ComparedCanary, letters: list[str]) -> list[str]:
    flags = [r.get("batch_invariant") for r in cmp["runs"]]
    head = "| concurrency | run | batch-inv. | " + " | ".join(md for _, md, _ in COST_COLUMNS) + " |"
    lines = [head, "|---:|---|---|" + "---:|" * len(COST_COLUMNS)]
    show = cost_formats(canary)
    for lv in canary.get("cost", []):
        for letter, flag, row in zip(letters, flags, lv["runs"], strict=True):
            cells = [show[k](None if row is None else row[k]) for k, _, _ in COST_COLUMNS]
            lines.append(
                f"| {text(lv['concurrency'])} | {letter} | {batch_invariance(flag)} | " + " | ".join(cells) + " |"
            )
    return lines


def references_md(cmp: Comparison) -> list[str]:
    """Which run broke which run's reference, and where; nothing for a comparison without ``references``."""
    refs = cmp.get("references")
    if refs is None:
        return []
    letter = run_letters(cmp)
    said = reference_sentences(refs)
    lines = ["", "### Reference completions, run against run", "", REFERENCE_NOTE, "", *(f"- {text(x)}" for x in said)]
    lines += ["", "| canary | run | against | reference | first divergence | there / reference's |"]
    lines.append("|---|---|---|---|---:|---|")
    for r in refs:
        at = r["first_divergence"]
        there = "—" if at is None else f"{code(r['token'])} / {code(r['reference_token'])}"
        where = "—" if at is None else f"{r['unit']} {at}"
        run, base = letter[r["run"]], letter[r["compared_with"]]
        lines.append(f"| {code(r['canary'])} | {run} | {base} | {r['verdict']} | {where} | {there} |")
    return lines


def coldboot_md(cmp: Comparison) -> list[str]:
    """The cold-boot answer per run and canary (as ``comparison.html`` has it); nothing without cold-boot runs."""
    boots = cmp.get("coldboot")
    if not boots:
        return []
    letter = run_letters(cmp)
    lines = ["", "### First request after a cold boot versus the rest", ""]
    lines += ["| run | canary | first differs, rest agree | distinct first / warm | boots with errors |"]
    lines.append("|---|---|---:|---:|---:|")
    for b in boots:
        for c in b["canaries"]:
            lines.append(
                f"| {letter.get(b['run'], b['run'])} | {code(c['id'])} | "
                f"{c['first_differs_rest_agree']} / {c['boots_counted']} | "
                f"{c['distinct_first']} / {c['distinct_warm']} | {c['boots_with_errors']} |"
            )
    return lines


def render_markdown(cmp: Comparison) -> str:
    letters = labels(cmp)
    lines = [
        "## Batch-invariance comparison",
        "",
        f"Runs by letter; deltas in parentheses are against run {letters[0]}.",
        "",
    ]
    lines += legend(cmp)
    lines += coldboot_md(cmp)
    lines += references_md(cmp)
    lines += kv_md(cmp)
    for c in cmp["canaries"]:
        lines += ["", f"### Canary {code(c['id'])}", ""]
        lines += [f"- **{letter}**: {text(v)}" for letter, v in zip(letters, c["verdicts"], strict=True)]
        for key, title in MD_METRICS:
            lines += ["", f"#### {title}", "", *metric_table(c, key, letters)]
        lines += ["", "#### Cost beside determinism", "", COST_NOTE, "", *cost_table(cmp, c, letters)]
    return "\n".join(lines) + "\n"
