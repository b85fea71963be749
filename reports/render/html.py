"""Self-contained HTML rendering of a finished report: inline CSS and SVG, no script, no network.

Consumes the report only (``reports.model.report.Report``). Every string that came from a model, a user or a file
goes through ``reports.render.htmltext.escape`` (markup and control characters); the report itself is embedded as
inert JSON (``type="application/json"``, with ``<``, ``>`` and ``&`` escaped) for tools that want the numbers
from the page.
"""

from __future__ import annotations

import json
from typing import Any

from reports.model.coresidency import CoResidencyGroup
from reports.model.finite import scrub
from reports.model.report import Canary, Fork, Level, Reference, Report
from reports.render import pictures, plots
from reports.render.cells import at_level, others_cell
from reports.render.htmltext import escape
from reports.render.md import (
    FORK_CLASSES,
    ci,
    claim_heading,
    fmt,
    fork_count,
    fork_rule,
    headline,
    held,
    others,
    pct,
    unmeasured_lines,
)
from reports.render.provenance import kv_effect_html, provenance_html
from reports.render.rescore import rescore_html
from reports.render.seeds import sampled_forks, seeds_html
from reports.render.sides import sides_html
from reports.render.steps import steps_html

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;max-width:1180px;color:#111;
padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.verdict{font-size:16px;font-weight:600;background:#f1f5f9;border-left:6px solid #64748b;padding:8px 12px}
.verdict.diverged{background:#fef2f2;border-left-color:#dc2626}.verdict.invariant{background:#f0fdf4;
border-left-color:#16a34a}.cue{display:inline-block;font-size:13px;letter-spacing:.04em;text-transform:uppercase;
color:#fff;background:#64748b;border-radius:3px;padding:1px 8px;margin-right:10px;vertical-align:1px}
.diverged .cue{background:#dc2626}.invariant .cue{background:#15803d}
.verdict.not-measured{background:#fffbeb;border-left-color:#d97706}.not-measured .cue{background:#b45309}
.alert{font-size:16px;font-weight:600;background:#fef2f2;border-left:6px solid #991b1b;padding:8px 12px}
.nw{white-space:nowrap}td{white-space:nowrap}td.l{white-space:normal}
.warn{background:#fef3c7;border-left:4px solid #d97706;padding:6px 12px;margin:6px 0;font-size:13px}
.meta{color:#555}table{border-collapse:collapse;margin:8px 0;font-variant-numeric:tabular-nums}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f8fafc}td.l,th.l{text-align:left}
.charts{display:flex;flex-wrap:wrap;gap:12px}.chart{border:1px solid #eee;background:#fff}
.chart .title{font-weight:600;font-size:13px}.chart .tick{font-size:11px;fill:#555}.chart .legend{font-size:11px}
.chart .axis{stroke:#999}.chart .grid{stroke:#eee}.chart .line{fill:none;stroke-width:2}
.chart .bar{stroke-width:2;opacity:.5}.chart .point-label{font-size:10px}
code,.tok{font-family:ui-monospace,Menlo,Consolas,monospace;background:#f1f5f9;border-radius:3px;padding:0 2px;
white-space:pre}
.split{font-family:ui-monospace,Menlo,Consolas,monospace}.prefix{color:#555}.fork{margin:4px 0 4px 24px}
.ref{color:#166534}.oth{color:#b91c1c}
"""


OUTCOMES = {"diverged": "Diverged", "invariant": "Invariant", "not measured": "Not measured", "no answer": "No answer"}


def outcome(entry: Canary) -> str:
    """The canary's verdict in one word: ``diverged`` (a completion left the reference, or the baseline
    disagrees with itself), ``invariant`` (every completion equals the reference and every sweep level's load was
    there), ``not measured`` (no divergence, but some level's load was not there: ``reports.analysis.level_load``, never
    shown as invariant) or ``no answer`` (no completion to judge)."""
    o: dict[str, Any] = dict(entry.get("overall", {}))  # none in a hand-made entry: judged by its reference
    ref = entry["reference"]
    if (o.get("unique_completions") or 0) > 1 or o.get("earliest_divergence") is not None:
        return "diverged"
    if (o.get("diverged") or 0) > 0 or ref.get("self_consistent") is False:
        return "diverged"
    if not (o.get("completions") or 0):
        return "no answer"
    return "not measured" if any(lv.get("not_measured") for lv in entry.get("levels", [])) else "invariant"


def verdict_box(entry: Canary, name: bool = False) -> str:
    """The verdict with its cue: a coloured word (``outcome``) first, then the sentence; ``name``: the
    canary's id too (the summary at the top of the page)."""
    kind = outcome(entry)
    who = f"<code>{escape(entry['id'])}</code>: " if name else ""
    return (
        f'<p class="verdict {kind.replace(" ", "-")}" data-outcome="{kind}"><span class="cue">{OUTCOMES[kind]}</span>'
        f"{who}{escape(entry['verdict'])}</p>"
    )


def esc(v: Any) -> str:
    return escape(fmt(v) if not isinstance(v, str) else v, quote=True)


def tok(s: str | None) -> str:
    if s is None:
        return '<span class="tok">(end)</span>'
    return (
        f'<span class="tok">{escape(s.encode("unicode_escape").decode("ascii") if not s.isprintable() else s)}</span>'
    )


def embedded_json(obj: object) -> str:
    """JSON safe inside a <script> element: no ``</script>``, ``<!--`` or ``&`` can survive."""
    text = json.dumps(scrub(obj)[0], ensure_ascii=True, allow_nan=False)  # NaN is not JSON: null
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def levels_table(levels: list[Level]) -> str:
    head = (
        "<tr><th>concurrency</th><th>canaries</th><th>errors</th><th>unique</th><th>diverged</th>"
        "<th>divergence rate</th><th>95% CI</th><th>first div. min / median / max</th><th>modal share</th>"
        "<th>drift max</th><th>drift mean</th><th>bitwise equal</th><th>others min / med / max</th>"
        "<th>held throughout</th><th>at level</th></tr>"
    )
    rows = []
    for lv in levels:
        fd, dr, co = lv["first_divergence"], lv["logprob_drift"], lv.get("co_residency")
        cells = [
            lv["concurrency"],
            lv["canaries"],
            lv["errors"],
            lv["unique_completions"],
            fmt(lv["diverged"]),
            pct(lv["divergence_rate"]),
            ci(lv["divergence_rate_ci95"]),
            "—" if fd is None else f"{fd['min']} / {fmt(fd['median'])} / {fd['max']}",
            pct(lv["modal_share"]),
            fmt(None if dr is None else dr["max"]),
            fmt(None if dr is None else dr["mean"]),
            pct(None if dr is None else dr["bitwise_equal_share"]),
            others_cell(lv) or others(co).replace("/", " / "),
            held(co),
            at_level(lv),
        ]
        rows.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>")
    why = "".join(f'<p class="warn">{esc(line)}</p>' for line in unmeasured_lines(levels))
    return f"<table>{head}{''.join(rows)}</table>{why}"


def co_residency_table(groups: list[CoResidencyGroup] | None) -> str:
    """Divergence by measured co-residency: rows are the other requests the engine really ran beside
    the canaries (per-canary median over each lifetime)."""
    if not groups:
        return ""
    head = (
        "<tr><th>others</th><th>canaries</th><th>unique</th><th>diverged</th><th>divergence rate</th>"
        "<th>95% CI</th><th>earliest divergence</th><th>others min / max</th></tr>"
    )
    rows = []
    for g in groups:
        cells = [
            g["others"],
            g["canaries"],
            g["unique_completions"],
            fmt(g["diverged"]),
            pct(g["divergence_rate"]),
            ci(g["divergence_rate_ci95"]),
            fmt(g["earliest_divergence"]),
            f"{fmt(g['min'])} / {fmt(g['max'])}",
        ]
        rows.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>")
    return (
        "<h3>Divergence by measured co-residency</h3><p class='meta'>Other requests the engine ran beside each "
        "canary over its lifetime (its batch sizes where the engine reports them, else its /metrics running "
        f"gauge), per-canary median.</p><table>{head}{''.join(rows)}</table>"
    )


def split_view(entry: Canary, context: int = 24) -> str:
    """Where the tokens split: the shared prefix, then each fork with how many canaries took each side."""
    ref, forks = entry["reference"], entry["forks"]
    if ref["length"] is None:
        return "<p>No completion to show.</p>"
    if not forks:
        return f"<p>All completions follow the reference for its {ref['length']} {escape(ref['unit'])}s.</p>"
    first = forks[0]["position"]
    shown = ref["tokens"][max(0, first - context) : first]
    lead = f"… ({first - context} earlier) " if first > context else ""
    unit = escape(ref["unit"]) + ("" if first == 1 else "s")
    parts = [f'<div class="split"><div class="prefix">shared prefix ({first} {unit}): {lead}']
    parts += [tok(t) for t in shown]
    parts.append("</div>")
    for f in forks[:20]:
        gap = f["top1_top2_gap"]
        parts.append(
            f'<div class="fork">at {f["position"]}: reference <span class="ref">{tok(f["reference_token"])}</span>'
            f' → <span class="oth">{tok(f["other_token"])}</span> in {f["count"]} canaries'
            f" (first at concurrency {f['first_seen_concurrency']}; top1−top2 gap {esc(gap)})</div>"
        )
    if len(forks) > 20:
        parts.append(f'<div class="fork">…and {len(forks) - 20} more forks (see the table).</div>')
    parts.append("</div>")
    return "".join(parts)


def forks_table(forks: list[Fork]) -> str:
    if not forks:
        return "<p>No forks.</p>"
    head = (
        '<tr><th>position</th><th class="l">reference token</th><th class="l">other token</th><th>canaries</th>'
        '<th>top1−top2 gap</th><th>gap (steps)</th><th class="l">class</th><th>first at concurrency</th>'
        '<th class="l">by concurrency</th></tr>'
    )
    rows = [
        f"<tr><td>{f['position']}</td><td class='l'>{tok(f['reference_token'])}</td><td class='l'>"
        f"{tok(f['other_token'])}</td><td>{f['count']}</td><td>{esc(f['top1_top2_gap'])}</td>"
        f"<td>{esc(f.get('gap_steps'))}</td><td class='l'>{esc(f.get('class'))}</td>"
        f"<td>{f['first_seen_concurrency']}</td><td class='l'>"
        f"{escape(', '.join(f'{k}: {v}' for k, v in f['levels'].items()))}</td></tr>"
        for f in forks[:200]
    ]
    return f"<table>{head}{''.join(rows)}</table>"


def reference_html(ref: Reference) -> str:
    kind = "the baseline (canary sent alone before the sweep)" if ref["kind"] == "baseline" else "the modal completion"
    out = [
        f"<p>Reference: {kind}, compared by <b>{escape(ref['identity'])}</b>; {ref['completions']} completions, "
        f"{ref['unique_completions']} unique; length {esc(ref['length'])} {escape(ref['unit'])}s.</p>"
    ]
    if note := ref.get("identity_note"):
        out.append(f'<p class="warn">{escape(note)}</p>')
    if ref.get("self_consistent") is False:
        out.append(
            f'<p class="warn">The baseline disagrees with itself: {ref["unique_completions"]} unique completions '
            f"over {ref['completions']} baseline canaries (earliest divergence {esc(ref['earliest_divergence'])}). "
            "That alone is a finding: the endpoint is not deterministic even unloaded.</p>"
        )
    if (ref_text := ref.get("text")) is not None:
        out.append(f"<details><summary>Reference text</summary><pre>{escape(ref_text)}</pre></details>")
    return "".join(out)


def canary_html(entry: Canary, sampled: str | None = None) -> str:
    """``sampled``: a sampled canary's fork classes (``reports.render.seeds.sampled_forks``), said instead of the
    near-tie table."""
    named = [("this run", entry)]
    charts = [
        plots.unique_vs_level(named),
        plots.rate_vs_level(named),
        plots.divergence_cdf(entry, entry["reference"]["unit"]),
        plots.drift_vs_level(named),
        plots.latency_vs_level(named),
        pictures.drift_heatmap_chart(entry),
        pictures.first_divergence_chart(entry),
        pictures.fork_gap_chart(entry),
    ]
    return (
        f"<h2>Canary <code>{escape(entry['id'])}</code></h2>"
        f"{verdict_box(entry)}{reference_html(entry['reference'])}"
        f"{levels_table(entry['levels'])}{_sides_or_groups(entry)}{steps_html(entry.get('engine_steps'))}"
        f"{provenance_html(entry.get('provenance'))}"
        f"<div class='charts'>{''.join(charts)}</div>"
        f"<h3>Where the tokens split</h3>{split_view(entry)}<h3>Forks</h3>{_fork_classes(entry, sampled)}"
        f"{forks_table(entry['forks'])}{claim_html(entry)}"
    )


def _sides_or_groups(entry: Canary) -> str:
    """A prefill/decode run's sides (``reports.render.sides``), else the divergence by measured co-residency."""
    sides = entry.get("sides")
    return sides_html(sides) if sides else co_residency_table(entry.get("by_co_residency"))


def claim_html(entry: Canary) -> str:
    """The claim "divergence rate < P at 95%" per level (``loadgen.core.claims``), as ``report.md`` has it."""
    head = claim_heading(entry)
    if head is None:
        return ""
    rows = "".join(
        f"<tr><td>{esc(lv['concurrency'])}</td><td>{escape(lv['claim']['status'].replace('_', ' '))}"
        f"{' (ended early)' if lv['claim']['ended_early'] else ''}</td><td>{esc(lv['claim']['completions'])}</td>"
        f"<td>{esc(lv['claim']['diverged'])}</td><td>{esc(lv['claim']['upper_bound'])}</td></tr>"
        for lv in entry["levels"]
    )
    note = bounds_note(entry)
    return (
        f"<h3>Claim</h3><p class='meta'>{escape(head)}</p><table><tr><th>concurrency</th><th>claim</th>"
        f"<th>completions</th><th>diverged</th><th>95% upper bound</th></tr>{rows}</table>"
        + (f"<p class='meta bounds-note'>{escape(note)}</p>" if note else "")
    )


def bounds_note(entry: Canary) -> str:
    """Where the levels table's 95% interval (two-sided Wilson) and the claim's 95% upper bound (exact,
    one-sided) read differently, a sentence that says why and where; "" where they agree as printed."""
    differ = []
    for lv in entry["levels"]:
        wilson, claim = lv.get("divergence_rate_ci95"), lv.get("claim")
        if not wilson or len(wilson) != 2 or not claim or claim.get("upper_bound") is None:
            continue
        shown, exact = pct(wilson[1]), pct(claim["upper_bound"])
        if shown != exact:
            differ.append(f"concurrency {lv['concurrency']}: Wilson {shown}, exact {exact}")
    if not differ:
        return ""
    return (
        "The 95% CI in the table above is the two-sided Wilson score interval, a reading of the rate; the claim "
        "is decided on the exact one-sided (Clopper-Pearson) 95% upper bound, a guarantee, so their upper ends "
        "differ (" + "; ".join(differ) + ")."
    )


def _fork_classes(entry: Canary, sampled: str | None) -> str:
    return f"<p class='meta'>{escape(sampled)}</p>" if sampled else fork_classes_html(entry)


def fork_classes_html(entry: Canary) -> str:
    """Near-tie flips and structural divergences per level (``reports.analysis.forks``), and how they were told
    apart."""
    g = entry.get("fork_gaps")
    if not g or "overall" not in entry:  # a report from before fork classes
        return ""
    rows = [("overall", entry["overall"]), *((str(lv["concurrency"]), lv) for lv in entry["levels"])]
    body = "".join(
        f"<tr><td>{esc(name)}</td><td>{esc(b.get('diverged'))}</td>"
        + "".join(f"<td>{esc(fork_count(b, k))}</td>" for k in FORK_CLASSES)
        + "</tr>"
        for name, b in rows
    )
    return (
        f"<p class='meta'>{escape(fork_rule(g))}</p><table><tr><th>concurrency</th><th>diverged</th>"
        f"<th>near-tie flips</th><th>structural</th><th>unclassified</th></tr>{body}</table>"
    )


def page(title: str, body: str, data: object) -> str:
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f'<meta name="viewport" content="width=device-width,initial-scale=1"><style>{CSS}</style></head>'
        f'<body>{body}<script type="application/json" id="report-data">{embedded_json(data)}</script></body></html>\n'
    )


def render_html(report: Report) -> str:
    """The page: what failed first (``headline``), then each canary's verdict with its cue, then who ran what,
    then the notices (they qualify the verdict; they must not be read before it), the seed contracts (a verdict on
    the run's sampled canaries together), then per canary the rest."""
    run = report["run"]
    labels = ", ".join(f"{k}={v}" for k, v in sorted(run.get("labels", {}).items()))
    head = "<h1>Batch-invariance report</h1>" + "".join(f'<p class="alert">{esc(h)}</p>' for h in headline(report))
    head += "".join(verdict_box(e, name=True) for e in report["canaries"])
    head += (
        f"<p class='meta'>run <code>{esc(run.get('id'))}</code> · model "
        f"<code>{esc(run.get('model'))}</code> at <code>{esc(run.get('endpoint'))}</code> · status "
        f"{esc(run.get('status'))} · <span class='nw'>{esc(run.get('started'))}</span> → "
        f"<span class='nw'>{esc(run.get('finished'))}</span>"
        + (f" · labels {escape(labels)}" if labels else "")
        + "</p>"
    )
    said = run.get("server_config", {}).get("summary")
    head += f"<p class='meta'>server says: {esc(said)}</p>" if said else ""
    witness = run.get("witness")
    head += f"<p class='meta'>witness: {esc(witness['summary'])}</p>" if witness else ""
    client = report.get("client_load", {}).get("summary")
    head += f"<p class='meta'>{esc(client)}</p>" if client else ""
    head += "".join(f'<p class="warn">{esc(n)}</p>' for n in run.get("notices") or [])
    if report["input"]["skipped_lines"]:
        head += f'<p class="warn">Skipped {report["input"]["skipped_lines"]} unreadable line(s) while reading.</p>'
    contracts = report.get("seed_contracts")
    body = "".join(canary_html(e, sampled_forks(contracts, str(e["id"]))) for e in report["canaries"])
    body = body or "<p>No canary records in this run.</p>"
    head += seeds_html(report.get("seed_contracts")) + rescore_html(report.get("rescore"))
    head += kv_effect_html(report.get("kv_effect"))
    return page(f"Batch-invariance report {run.get('id')}", head + body, report)
