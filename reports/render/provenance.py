"""The "Where the KV came from" part of a canary's pages: divergence by provenance, and the asked path's proof.

Consumes ``report.json``'s ``canaries[i].provenance`` block only (``reports.model.provenance``): per provenance
(computed, GPU prefix hit, offload tier, P/D transfer, unknown) the completions, how many diverged from the
reference, their first divergence and largest logprob drift; then the asked path, how many records proved it
and why the others did not. Escaping is the callers' rules: markdown through ``reports.render.mdtext``, HTML
through ``reports.render.htmltext``; no analysis, no I/O.
"""

from __future__ import annotations

from reports.model.provenance import CanaryProvenance, ProvenanceGroup
from reports.render.cells import ci, fmt, pct
from reports.render.htmltext import escape
from reports.render.mdtext import text

HEADING = "Where the KV came from"
NAMES = {
    "computed": "computed",
    "gpu_prefix": "GPU prefix hit",
    "offload": "offload tier",
    "transfer": "P/D transfer",
    "unknown": "unknown",
}
COLUMNS = ("provenance", "completions", "diverged", "rate", "95% CI", "first divergence min/median", "max drift")


def _cells(g: ProvenanceGroup) -> list[str]:
    first = g["first_divergence"]
    return [
        NAMES.get(g["provenance"], g["provenance"]),
        str(g["completions"]),
        fmt(g["diverged"]),
        pct(g["divergence_rate"]),
        ci(g["divergence_rate_ci95"]),
        "—" if first is None else f"{first['min']}/{fmt(first['median'])}",
        fmt(g["max_logprob_drift"]),
    ]


def _proof(block: CanaryProvenance) -> str:
    evidence = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in block["evidence"].items())
    said = f"{block['records']} records (ok, not warm-up); evidence: {evidence}."
    if not block["asked"]:
        return said
    why = "; ".join(f"{k} ×{v}" for k, v in block["reasons"].items())
    proof = f" Asked path {block['asked']}: proven for {block['proven']}"
    if block["not_proven"]:
        proof += f", path not proven for {block['not_proven']} ({why}: left out of that path's figures)"
    if block["unknown"]:
        proof += f", unknown for {block['unknown']} (no evidence)"
    return said + proof + "."


def provenance_md(block: CanaryProvenance | None) -> list[str]:
    if not block:
        return []
    out = [f"{HEADING}:", "", text(_proof(block)), ""]
    if block["groups"]:
        out += ["| " + " | ".join(COLUMNS) + " |", "|---|" + "---:|" * (len(COLUMNS) - 1)]
        out += ["| " + " | ".join(text(c) for c in _cells(g)) + " |" for g in block["groups"]]
        out.append("")
    return out


def provenance_html(block: CanaryProvenance | None) -> str:
    if not block:
        return ""
    head = "".join(f"<th>{escape(c)}</th>" for c in COLUMNS)
    rows = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in _cells(g)) + "</tr>" for g in block["groups"])
    table = f"<table><tr>{head}</tr>{rows}</table>" if block["groups"] else ""
    return f"<h3>{HEADING}</h3><p class='meta'>{escape(_proof(block))}</p>{table}"
