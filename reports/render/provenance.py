"""The "Where the KV came from" part of a canary's pages (divergence by provenance, and the asked path's proof), and
the run's "Same request, KV from elsewhere" table (``report.json``'s ``kv_effect``).

Consumes ``report.json``'s ``canaries[i].provenance`` block only (``reports.model.provenance``): per provenance
(computed, GPU prefix hit, offload tier, P/D transfer, unknown) the completions, how many diverged from the
reference, their first divergence and largest logprob drift; then the asked path, how many records proved it
and why the others did not. Escaping is the callers' rules: markdown through ``reports.render.mdtext``, HTML
through ``reports.render.htmltext``; no analysis, no I/O.
"""

from __future__ import annotations

from reports.model.provenance import CanaryProvenance, KvEffect, KvEffectGroup, KvOffloadCheck, ProvenanceGroup
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


def proof_sentence(block: CanaryProvenance) -> str:
    """The records, their evidence and, where the canary asked for a path, how many proved it and why not."""
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
    out = [f"{HEADING}:", "", text(proof_sentence(block)), ""]
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
    return f"<h3>{HEADING}</h3><p class='meta'>{escape(proof_sentence(block))}</p>{table}"


EFFECT_HEADING = "Same request, KV from elsewhere"
EFFECT_COLUMNS = (
    "KV source",
    "canaries",
    "answers",
    "same tokens",
    "bitwise equal",
    "max drift",
    "first divergence",
    "bitwise = GPU hit",
    "drift vs GPU hit",
)
EFFECT_NOTE = (
    "One request body (equal but for a cache salt) sent alone by several canaries, its prompt's KV computed, found "
    "in the GPU prefix cache or loaded from elsewhere; each answer against the modal {ref} answer (canary {canary}). "
    "An exact tier gives the GPU hit's answer bit for bit: both prefill only the prompt's tail on the same cached KV."
)


def _effect_cells(g: KvEffectGroup) -> list[str]:
    return [
        NAMES.get(g["provenance"], g["provenance"]),
        ", ".join(g["canaries"]),
        str(g["answers"]),
        f"{g['same_tokens']}/{g['answers']}",
        f"{g['bitwise']}/{g['answers']}",
        fmt(g["max_logprob_drift"]),
        fmt(g["first_divergence"]),
        "—" if g["bitwise_gpu_hit"] is None else f"{g['bitwise_gpu_hit']}/{g['answers']}",
        fmt(g["max_logprob_drift_gpu_hit"]),
    ]


def _effect_note(e: KvEffect) -> str:
    return EFFECT_NOTE.format(ref=NAMES.get(e["reference"], e["reference"]), canary=e["reference_canary"])


def kv_effect_md(blocks: list[KvEffect] | None) -> list[str]:
    out: list[str] = []
    for e in blocks or []:
        out += [f"### {EFFECT_HEADING}", "", text(_effect_note(e)), ""]
        out += ["| " + " | ".join(EFFECT_COLUMNS) + " |", "|---|---|" + "---:|" * (len(EFFECT_COLUMNS) - 2)]
        out += ["| " + " | ".join(text(c) for c in _effect_cells(g)) + " |" for g in e["groups"]]
        out.append("")
    return out


def kv_effect_html(blocks: list[KvEffect] | None) -> str:
    out = ""
    head = "".join(f"<th>{escape(c)}</th>" for c in EFFECT_COLUMNS)
    for e in blocks or []:
        rows = "".join(
            "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in _effect_cells(g)) + "</tr>" for g in e["groups"]
        )
        note = f"<p class='meta'>{escape(_effect_note(e))}</p>"
        out += f"<h2>{EFFECT_HEADING}</h2>{note}<table><tr>{head}</tr>{rows}</table>"
    return out


def tier_line(check: KvOffloadCheck | None) -> str | None:
    """One line where an offload tier was asked for and did not both store and load (None where it did)."""
    if check is None or check["moved"]:
        return None
    if check["moved"] is None:
        return (
            "KV offload tier asked for, but no engine published its store/load counters: the offload path is unproven."
        )
    said = f"stored {fmt(check['store_bytes'])} bytes, loaded {fmt(check['load_bytes'])}"
    return f"KV offload tier asked for, but it never both stored and loaded ({said}): no canary went through it."
