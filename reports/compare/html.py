"""``comparison.html``: runs side by side as a report page, the runs overlaid in each chart.

Why this shape: a reader compares runs by eye first, so per canary the charts come first, one line
per run in each (unique completions, divergence rate, earliest divergence, logprob drift, latency
versus concurrency), then one small table per figure (a column per run, deltas against run A), then
the cost table. Runs are named by letter, with a legend table at the top (``reports.render.compare_cells``).
Cold-boot runs (``loadgen matrix d3-2x2``) get their own table, the first request after a boot against the rest, and a
canary measured at one concurrency level only gets no chart versus concurrency (it would be one dot).
Pure: the comparison dict and the compared reports in, a self-contained page out (the charts are
``reports.render.plots``'; every string from a run goes through ``reports.render.htmltext.escape``).
"""

from __future__ import annotations

from reports.compare.references import said as reference_sentences
from reports.model.comparison import ComparedCanary, Comparison, FigureName
from reports.model.report import Report
from reports.render import plots
from reports.render.compare_cells import (
    COST_COLUMNS,
    COST_NOTE,
    FIGURES,
    REFERENCE_NOTE,
    TITLES,
    batch_invariance,
    cost_formats,
    labels,
    level_blocks,
    run_letters,
    with_delta,
)
from reports.render.compare_kv import kv_html
from reports.render.html import esc, page, tok
from reports.render.htmltext import escape


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
    show = cost_formats(canary)
    for lv in canary.get("cost", []):
        for letter, flag, row in zip(letters, flags, lv["runs"], strict=True):
            cells = "".join(f"<td>{escape(show[k](None if row is None else row[k]))}</td>" for k, _, _ in COST_COLUMNS)
            lead = (
                f"<td>{esc(lv['concurrency'])}</td><td class='l'>{escape(letter)}</td><td>{batch_invariance(flag)}</td>"
            )
            rows.append(f"<tr>{lead}{cells}</tr>")
    out = f"<h3>Cost beside determinism</h3><p class='meta'>{escape(COST_NOTE)}</p>"
    out += f"<table>{head}{''.join(rows)}</table>"
    measured = [r for lv in canary.get("cost", []) if lv["concurrency"] != "overall" for r in lv["runs"] if r]
    if cmp.get("frontier") and any(r["background_tokens_per_s"] is not None for r in measured):
        out += f"<div class='charts'>{plots.frontier(cmp, canary)}</div>"
    return out


def canary_html(cmp: Comparison, c: ComparedCanary, reports: list[tuple[str, Report]]) -> str:
    letters = labels(cmp)
    named = [(x, e) for x, (_, r) in zip(letters, reports, strict=True) for e in r["canaries"] if e["id"] == c["id"]]
    unit = next((u for _, e in named if (u := e["reference"].get("unit"))), "token")
    out = [f"<h2>Canary <code>{escape(c['id'])}</code></h2><ul>"]
    out += [f"<li><b>{escape(x)}</b>: {esc(v)}</li>" for x, v in zip(letters, c["verdicts"], strict=True)]
    out.append("</ul>")
    if len(c["levels"]) >= 2:  # a line needs two levels: a cold-boot run has one (0), a chart of it is one dot
        out.append("<div class='charts'>")
        out += [plots.unique_vs_level(named), plots.rate_vs_level(named), plots.earliest_vs_level(named, unit)]
        out += [plots.drift_vs_level(named), plots.latency_vs_level(named), "</div>"]
    else:
        out.append(f"<p class='meta'>{escape(ONE_LEVEL)}</p>")
    out.append("<h3>Figures by concurrency</h3><div class='charts'>")
    out += [figure_table(c, key, letters) for key in FIGURES]
    out += ["</div>", cost_html(cmp, c, letters)]
    return "".join(out)


ONE_LEVEL = "One concurrency level in every run: no chart versus concurrency; the tables below have the figures."


def coldboot_html(cmp: Comparison) -> str:
    """The cold-boot answer (``reports.analysis.coldboot``): per run and canary, boots where the first request after
    a boot differs and the rest agree, and each boot's completions in order; "" without cold-boot runs."""
    boots = cmp.get("coldboot")
    if not boots:
        return ""
    letter = run_letters(cmp)
    head = "<tr><th class='l'>run</th><th class='l'>canary</th><th>first differs, rest agree</th>"
    head += "<th>distinct first / warm</th><th>boots with errors</th><th class='l'>completions per boot</th></tr>"
    rows = []
    for b in boots:
        for c in b["canaries"]:
            seqs = "".join(f"<div><code>{escape(x)}</code></div>" for x in c["sequences"])
            rows.append(
                f"<tr><td class='l'><b>{escape(letter.get(b['run'], b['run']))}</b></td>"
                f"<td class='l'><code>{escape(c['id'])}</code></td>"
                f"<td>{c['first_differs_rest_agree']} / {c['boots_counted']}</td>"
                f"<td>{c['distinct_first']} / {c['distinct_warm']}</td><td>{c['boots_with_errors']}</td>"
                f"<td class='l'>{seqs}</td></tr>"
            )
    first = boots[0]
    note = (
        f"{first['boots']} boots per run, {first['requests_per_boot']} one-at-a-time requests per canary per boot. "
        "First differs, rest agree: boots where request 1 differs from requests 2..N and those agree. Distinct "
        "first / warm: distinct request-1 and request-2..N completions across boots. c1, c2, ... name distinct "
        "completions in order of first appearance (letters name runs); x is a failed request."
    )
    return (
        f"<h2>First request after a cold boot versus the rest</h2><p class='meta'>{escape(note)}</p>"
        f"<table class='coldboot'>{head}{''.join(rows)}</table>"
    )


def references_html(cmp: Comparison) -> str:
    """Which run broke which run's reference, and where; "" for a comparison without ``references``."""
    refs = cmp.get("references")
    if refs is None:
        return ""
    letter = run_letters(cmp)
    said = reference_sentences(refs)
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
    body += [coldboot_html(cmp), references_html(cmp), kv_html(cmp)]
    body += [canary_html(cmp, c, reports) for c in cmp["canaries"]]
    return page("Batch-invariance comparison", "".join(body), cmp)
