"""The "why it diverged" part of a canary's pages: what the engine's own steps held where its logprobs moved.

Consumes ``report.json``'s ``engine_steps`` block only (``reports.model.engine_steps``): the sentence that
names the separating factor, and the first drifts by step kind and by the others in the step, with their
95% intervals. Escaping is the callers' rules: markdown through ``reports.render.mdtext``, HTML through
``html.escape``; no analysis, no I/O.
"""

from __future__ import annotations

from html import escape

from reports.model.engine_steps import EngineSteps, Factor, FactorRow
from reports.render.cells import ci, pct
from reports.render.mdtext import text

SHOWN = ("step kind", "others in the step")  # the tables shown; every factor is in report.json


def _shown(block: EngineSteps) -> list[Factor]:
    return [f for f in block["factors"] if f["factor"] in SHOWN and f["rows"]]


def _interval(row: FactorRow) -> str:
    low, high = row["low"], row["high"]
    return "—" if low is None or high is None else ci([low, high])


def _meta(block: EngineSteps) -> str:
    return (
        f"From the engine step trace ({block['source']}): {block['joined']} of {block['records']} compared records "
        f"joined, {block['drifted']} drifted; {block['positions']} positions computed up to each first drift."
    )


def steps_md(block: EngineSteps | None) -> list[str]:
    if not block:
        return []
    out = ["Why it diverged (engine steps):", "", f"**{text(block['sentence'])}**", "", text(_meta(block)), ""]
    for f in _shown(block):
        out += [f"| {f['factor']} | positions | first drifts | rate | 95% CI |", "|---|---:|---:|---:|---:|"]
        out += [
            f"| {text(r['value'])} | {r['positions']} | {r['drifts']} | {pct(r['rate'])} | {_interval(r)} |"
            for r in f["rows"]
        ]
        out.append("")
    return out


def steps_html(block: EngineSteps | None) -> str:
    if not block:
        return ""
    tables = "".join(
        f"<table><tr><th>{escape(f['factor'])}</th><th>positions</th><th>first drifts</th><th>rate</th>"
        "<th>95% CI</th></tr>"
        + "".join(
            f"<tr><td>{escape(r['value'])}</td><td>{r['positions']}</td><td>{r['drifts']}</td><td>{pct(r['rate'])}</td>"
            f"<td>{_interval(r)}</td></tr>"
            for r in f["rows"]
        )
        + "</table>"
        for f in _shown(block)
    )
    return (
        f"<h3>Why it diverged</h3><p><strong>{escape(block['sentence'])}</strong></p>"
        f"<p class='meta'>{escape(_meta(block))}</p>{tables}"
    )
