"""``comparison.html``: runs side by side as a report page, the runs overlaid in each chart.

Why this shape: a reader compares runs by eye first, so per canary the charts come first, one line
per run in each (unique completions, divergence rate, earliest divergence, logprob drift, latency
versus concurrency), then one small table per figure (a column per run, deltas against run A), then
the cost table. Runs are named by letter, with a legend table at the top (``reports.compare_cells``).
Pure: the comparison dict and the compared reports in, a self-contained page out (the charts are
``reports.plots``'; every string from a run goes through ``html.escape``).
"""

from __future__ import annotations

from html import escape

from reports import plots
from reports.compare_cells import (
    COST_COLUMNS,
    COST_NOTE,
    FIGURES,
    REFERENCE_NOTE,
    TITLES,
    batch_invariance,
    labels,
    level_blocks,
    run_letters,
    with_delta,
)
from reports.compare_references import broke
from reports.model import Report
from reports.model_compare import ComparedCanary, Comparison, FigureName
from reports.render_html import esc, page, tok


def legend(cmp: Comparison) -> str:
    head = "<tr><th class='l'>run</th><th class='l'>name</th><th class='l'>model</th><th>batch-invariant</th>"
    head += "<th class='l'>labels</th><th class='l'>server says</th></tr>"
    rows = []
    for letter, r in zip(labels(cmp), cmp["runs"], strict=True):
        tags = ", ".join(f"{k}={v}" for k, v in sorted((r.get("labels") or {}).items()))
        rows.append(
            f"<tr><td class='l'><b>{escape(letter)}</b></td><td class='l'><code>{escape(r['name'])}</code></td>"
            f"<td class='l'><code>{esc(r['model'])}</code></td><td>{batch_invariance(r.get('batch_invariant'))}</td>"
            f"<td class='l'>{escape(tags) or '—'}</td><td class='l'>{esc(r.get('server'))}</td></tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>"


def figure_table(canary: ComparedCanary, key: FigureName, letters: list[str]) -> str:
    head = "<tr><th>concurrency</th>" + "".join(f"<th>{escape(x)}</th>" for x in letters) + "</tr>"
    rows = []
    for b in level_blocks(canary):
        cells = [with_delta(row, d, key, i == 0) for i, (row, d) in enumerate(zip(b["runs"], b["deltas"], strict=True))]
        rows.append(f"<tr><td>{esc(b['concurrency'])}</td>" + "".join(f"<td>{escape(x)}</td>" for x in cells) + "</tr>")
    return f"<table><caption>{escape(TITLES[key])}</caption>{head}{''.join(rows)}</table>"


def cost_html(cmp: Comparison, canary: ComparedCanary, letters: list[str]) -> str:
    flags = [r.get("batch_invariant") for r in cmp["runs"]]
    head = "<tr><th>concurrency</th><th class='l'>run</th><th>batch-invariant</th>"
    head += "".join(f"<th>{escape(title)}</th>" for _, _, title in COST_COLUMNS) + "</tr>"
    rows = []
    for lv in canary.get("cost", []):
        for letter, flag, row in zip(letters, flags, lv["runs"], strict=True):
            cells = "".join(f"<td>{esc(None if row is None else row[k])}</td>" for k, _, _ in COST_COLUMNS)
            lead = (
                f"<td>{esc(lv['concurrency'])}</td><td class='l'>{escape(letter)}</td><td>{batch_invariance(flag)}</td>"
            )
            rows.append(f"<tr>{lead}{cells}</tr>")
    out = f"<h3>Cost beside determinism</h3><p class='meta'>{escape(COST_NOTE)}</p>"
    out += f"<table>{head}{''.join(rows)}</table>"
    if cmp.get("frontier"):
        out += f"<div class='charts'>{plots.frontier(cmp, canary)}</div>"
    return out


def canary_html(cmp: Comparison, c: ComparedCanary, reports: list[tuple[str, Report]]) -> str:
    letters = labels(cmp)
    named = [(x, e) for x, (_, r) in zip(letters, reports, strict=True) for e in r["canaries"] if e["id"] == c["id"]]
    unit = next((u for _, e in named if (u := e["reference"].get("unit"))), "token")
    out = [f"<h2>Canary <code>{escape(c['id'])}</code></h2><ul>"]
    out += [f"<li><b>{escape(x)}</b>: {esc(v)}</li>" for x, v in zip(letters, c["verdicts"], strict=True)]
    out.append("</ul><div class='charts'>")
    out += [plots.unique_vs_level(named), plots.rate_vs_level(named), plots.earliest_vs_level(named, unit)]
    out += [plots.drift_vs_level(named), plots.latency_vs_level(named), "</div>"]
    out.append("<h3>Figures by concurrency</h3><div class='charts'>")
    out += [figure_table(c, key, letters) for key in FIGURES]
    out += ["</div>", cost_html(cmp, c, letters)]
    return "".join(out)


def references_html(cmp: Comparison) -> str:
    """Which run broke which run's reference, and where; "" for a comparison without ``references``."""
    refs = cmp.get("references")
    if refs is None:
        return ""
    letter = run_letters(cmp)
    said = broke(refs) or ["every run's reference completions equal those of the run it is compared with"]
    head = "<tr><th class='l'>canary</th><th class='l'>run</th><th class='l'>against</th><th class='l'>reference</th>"
    head += "<th>first divergence</th><th class='l'>there / reference's</th></tr>"
    rows = []
    for r in refs:
        at = r["first_divergence"]
        there = "—" if at is None else f"{tok(r['token'])} / {tok(r['reference_token'])}"
        where = "—" if at is None else escape(f"{r['unit']} {at}")
        rows.append(
            f"<tr><td class='l'><code>{escape(r['canary'])}</code></td><td class='l'>{escape(letter[r['run']])}</td>"
            f"<td class='l'>{escape(letter[r['compared_with']])}</td><td class='l'>{escape(r['verdict'])}</td>"
            f"<td>{where}</td><td class='l'>{there}</td></tr>"
        )
    items = "".join(f"<li>{escape(x)}</li>" for x in said)
    return (
        f"<h2>Reference completions, run against run</h2><p class='meta'>{escape(REFERENCE_NOTE)}</p>"
        f"<ul>{items}</ul><table>{head}{''.join(rows)}</table>"
    )


def render_html(cmp: Comparison, reports: list[tuple[str, Report]]) -> str:
    first = labels(cmp)[0]
    body = ["<h1>Batch-invariance comparison</h1>", legend(cmp)]
    body.append(
        f"<p class='meta'>Runs by letter in every chart and table; deltas in parentheses are against run {first}.</p>"
    )
    body.append(references_html(cmp))
    body += [canary_html(cmp, c, reports) for c in cmp["canaries"]]
    return page("Batch-invariance comparison", "".join(body), cmp)
