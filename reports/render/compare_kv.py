"""The comparison pages' "Where the KV came from, run by run" tables (``comparison.json``'s ``kv``).

Two tables: per canary and run, its records by KV source and whether the path it asked for ran; per run and source,
the same request's answers sent alone against the GPU hit's and the computed answer, and whether the run's offload
tier moved at all. Runs are named by letter (``reports.render.compare_cells.run_letters``). Escaping is the
callers' rule: markdown through ``reports.render.mdtext``, HTML through ``reports.render.htmltext``; no analysis.
"""

from __future__ import annotations

from reports.model.comparison import Comparison, KvEffectRow, KvSourceRow
from reports.render.cells import fmt
from reports.render.compare_cells import run_letters
from reports.render.htmltext import escape
from reports.render.mdtext import text
from reports.render.provenance import NAMES

HEADING = "Where the KV came from, run by run"
SOURCE_COLUMNS = ("canary", "run", "records by source", "asked path", "proven", "not proven")
EFFECT_COLUMNS = (
    "run",
    "KV source",
    "canaries",
    "answers",
    "bitwise = GPU hit",
    "drift vs GPU hit",
    "drift vs computed",
    "tier moved",
)
NOTE = (
    "Per canary, its records (ok, not warm-up) by where their prompt's KV came from, and whether the path it asked "
    "for ran; then one request sent alone, its answers by KV source against the GPU hit's answer (an exact tier "
    "equals it bit for bit) and the computed one."
)


def _source_cells(r: KvSourceRow, letter: dict[str, str]) -> list[str]:
    by = ", ".join(f"{NAMES.get(k, k)} {v}" for k, v in r["by_source"].items()) or "—"
    asked = r["asked"] or "—"
    proven = f"{r['proven']}/{r['records']}" if r["asked"] else "—"
    return [r["canary"], letter.get(r["run"], r["run"]), by, asked, proven, str(r["not_proven"]) if r["asked"] else "—"]


def _effect_cells(r: KvEffectRow, letter: dict[str, str]) -> list[str]:
    moved = {True: "yes", False: "no", None: "—"}[r["tier_moved"]]
    bitwise = "—" if r["bitwise_gpu_hit"] is None else f"{r['bitwise_gpu_hit']}/{r['answers']}"
    return [
        letter.get(r["run"], r["run"]),
        NAMES.get(r["provenance"], r["provenance"]),
        ", ".join(r["canaries"]),
        str(r["answers"]),
        bitwise,
        fmt(r["max_logprob_drift_gpu_hit"]),
        fmt(r["max_logprob_drift"]),
        moved,
    ]


def _tables(cmp: Comparison) -> tuple[list[list[str]], list[list[str]]] | None:
    kv = cmp.get("kv")
    if not kv:
        return None
    letter = run_letters(cmp)
    return [_source_cells(r, letter) for r in kv["sources"]], [_effect_cells(r, letter) for r in kv["effects"]]


def kv_md(cmp: Comparison) -> list[str]:
    tables = _tables(cmp)
    if tables is None:
        return []
    out = ["", f"### {HEADING}", "", NOTE]
    for columns, rows in zip((SOURCE_COLUMNS, EFFECT_COLUMNS), tables, strict=True):
        if rows:
            out += ["", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            out += ["| " + " | ".join(text(c) for c in row) + " |" for row in rows]
    return out


def kv_html(cmp: Comparison) -> str:
    tables = _tables(cmp)
    if tables is None:
        return ""
    out = f"<h2>{HEADING}</h2><p class='meta'>{escape(NOTE)}</p>"
    for columns, rows in zip((SOURCE_COLUMNS, EFFECT_COLUMNS), tables, strict=True):
        if rows:
            head = "".join(f"<th class='l'>{escape(c)}</th>" for c in columns)
            body = "".join("<tr>" + "".join(f"<td class='l'>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
            out += f"<table><tr>{head}</tr>{body}</table>"
    return out
