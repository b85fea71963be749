"""Put 2..N runs side by side: figures aligned by canary and concurrency level, deltas against the
first run, overlaid plots; ``comparison.json``, ``.md`` and ``.html``.

``compare_reports`` is pure (report dicts in, comparison dict out); ``write_comparison`` is the one
writer. Works on single- and multi-canary reports alike: canaries are matched by id; a canary or a
level missing from a run shows as ``null``, never 0.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from loadgen.errors import RunFolderError
from reports import cost, plots
from reports.mdtext import code, text
from reports.render_html import esc, page
from reports.render_md import fmt
from reports.writer import report_json, write_text

FIGURES = (
    "canaries",
    "errors",
    "unique_completions",
    "diverged",
    "divergence_rate",
    "earliest_divergence",
    "modal_share",
    "drift_max",
    "bitwise_equal_share",
)


def figures(block: dict[str, Any] | None) -> dict[str, Any] | None:
    if block is None:
        return None
    drift = block.get("logprob_drift")
    out = {k: block.get(k) for k in FIGURES[:7]}
    out["drift_max"] = None if drift is None else drift["max"]
    out["bitwise_equal_share"] = None if drift is None else drift["bitwise_equal_share"]
    return out


def _deltas(rows: list[dict[str, Any] | None]) -> list[dict[str, Any] | None]:
    base = rows[0]
    out: list[dict[str, Any] | None] = []
    for row in rows:
        if row is None or base is None:
            out.append(None)
            continue
        out.append({k: None if row[k] is None or base[k] is None else row[k] - base[k] for k in FIGURES})
    return out


def run_names(reports: list[tuple[str, dict[str, Any]]]) -> list[str]:
    names: list[str] = []
    for name, _ in reports:
        candidate, i = name, 2
        while candidate in names:
            candidate, i = f"{name} ({i})", i + 1
        names.append(candidate)
    return names


def compare_reports(reports: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """``reports``: (name, report) pairs, the first being the base that deltas are taken against."""
    names = run_names(reports)
    ids = sorted({e["id"] for _, r in reports for e in r["canaries"]})
    canaries = []
    for cid in ids:
        entries = [next((e for e in r["canaries"] if e["id"] == cid), None) for _, r in reports]
        overall = [figures(None if e is None else e["overall"]) for e in entries]
        levels = sorted({lv["concurrency"] for e in entries if e for lv in e["levels"]})
        per_level = []
        for level in levels:
            rows = [
                figures(None if e is None else next((x for x in e["levels"] if x["concurrency"] == level), None))
                for e in entries
            ]
            per_level.append({"concurrency": level, "runs": rows, "deltas": _deltas(rows)})
        pairs = list(zip([r for _, r in reports], entries, strict=True))
        costs = [
            {"concurrency": level if level is not None else "overall", "runs": [_cost(r, e, level) for r, e in pairs]}
            for level in [None, *levels]
        ]
        canaries.append(
            {
                "id": cid,
                "verdicts": [None if e is None else e.get("verdict") for e in entries],
                "reference_kinds": [None if e is None else e["reference"]["kind"] for e in entries],
                "overall": {"runs": overall, "deltas": _deltas(overall)},
                "levels": per_level,
                "cost": costs,
            }
        )
    flags = [cost.batch_invariant(r) for _, r in reports]
    return {
        "schema": 1,
        "frontier": cost.differ(flags),
        "runs": [
            {
                "name": n,
                "id": r["run"].get("id"),
                "model": r["run"].get("model"),
                "endpoint": r["run"].get("endpoint"),
                "labels": r["run"].get("labels", {}),
                "server": (r["run"].get("server_config") or {}).get("summary") or None,
                "batch_invariant": flag,
            }
            for n, (_, r), flag in zip(names, reports, flags, strict=True)
        ],
        "canaries": canaries,
    }


def _cost(report: dict[str, Any], entry: dict[str, Any] | None, level: int | None) -> dict[str, Any] | None:
    """One run's cost row (``reports.cost.cost_row``) for a canary at a level (None: overall)."""
    if entry is None:
        return None
    block = entry["overall"] if level is None else next((x for x in entry["levels"] if x["concurrency"] == level), None)
    return cost.cost_row(report, block, level)


COST_COLUMNS = (
    ("background_tokens_per_s", "background tokens/s"),
    ("canary_latency_p50", "canary p50 s"),
    ("canary_latency_p99", "canary p99 s"),
    ("unique_completions", "unique"),
    ("divergence_rate", "divergence rate"),
)
COST_NOTE = (
    "Background tokens/s: completion tokens of the level's successful background requests over the level's "
    "wall time (first background send to last background end); overall: all levels' tokens over the sum of "
    "their wall times. Canary latency: the canary's own p50 and p99 at that level."
)


def _bi(flag: Any) -> str:
    return {True: "on", False: "off"}.get(flag, "—")


def cost_markdown(cmp: dict[str, Any], c: dict[str, Any]) -> list[str]:
    names = [r["name"] for r in cmp["runs"]]
    flags = [r.get("batch_invariant") for r in cmp["runs"]]
    head = "| concurrency | run | batch-invariant | " + " | ".join(label for _, label in COST_COLUMNS) + " |"
    lines = ["", "Cost beside determinism. " + COST_NOTE, "", head, "|---:|---|---|" + "---:|" * len(COST_COLUMNS)]
    for lv in c.get("cost", []):
        for name, flag, row in zip(names, flags, lv["runs"], strict=True):
            cells = [fmt(None if row is None else row[k]) for k, _ in COST_COLUMNS]
            lines.append(f"| {text(lv['concurrency'])} | {text(name)} | {_bi(flag)} | " + " | ".join(cells) + " |")
    return lines


def cost_html(cmp: dict[str, Any], c: dict[str, Any]) -> str:
    names = [r["name"] for r in cmp["runs"]]
    flags = [r.get("batch_invariant") for r in cmp["runs"]]
    head = "<tr><th>concurrency</th><th class='l'>run</th><th>batch-invariant</th>"
    head += "".join(f"<th>{escape(label)}</th>" for _, label in COST_COLUMNS) + "</tr>"
    rows = []
    for lv in c.get("cost", []):
        for name, flag, row in zip(names, flags, lv["runs"], strict=True):
            cells = "".join(f"<td>{esc(None if row is None else row[k])}</td>" for k, _ in COST_COLUMNS)
            lead = f"<td>{esc(lv['concurrency'])}</td><td class='l'>{escape(name)}</td><td>{_bi(flag)}</td>"
            rows.append(f"<tr>{lead}{cells}</tr>")
    out = f"<h3>Cost beside determinism</h3><p class='meta'>{escape(COST_NOTE)}</p>"
    out += f"<table>{head}{''.join(rows)}</table>"
    if cmp.get("frontier"):
        out += f"<div class='charts'>{plots.frontier(cmp, c)}</div>"
    return out


def _signed(v: Any) -> str:
    if v is None:
        return "—"
    return f"{v:+.3g}" if isinstance(v, float) else f"{v:+d}"


def render_markdown(cmp: dict[str, Any]) -> str:
    names = [r["name"] for r in cmp["runs"]]
    lines = ["## Batch-invariance comparison", ""]
    lines += [
        f"- run {i + 1}: {code(r['name'])} (model {text(r['model'])}"
        + (f"; server says: {text(r['server'])}" if r.get("server") else "")
        + ")"
        for i, r in enumerate(cmp["runs"])
    ]
    keys = ("unique_completions", "divergence_rate", "earliest_divergence", "errors")
    for c in cmp["canaries"]:
        lines += ["", f"### Canary {code(c['id'])}", ""]
        lines.append("| concurrency | " + " | ".join(f"{k} ({text(n)})" for k in keys for n in names) + " |")
        lines.append("|---:|" + "---:|" * (len(keys) * len(names)))
        for lv in [{"concurrency": "overall", **c["overall"]}, *c["levels"]]:
            cells = []
            for k in keys:
                for i, (row, delta) in enumerate(zip(lv["runs"], lv["deltas"], strict=True)):
                    v = None if row is None else row[k]
                    d = "" if i == 0 or delta is None else f" ({_signed(delta[k])})"
                    cells.append(fmt(v) + d)
            lines.append(f"| {text(lv['concurrency'])} | " + " | ".join(cells) + " |")
        lines += cost_markdown(cmp, c)
    return "\n".join(lines) + "\n"


def render_html(cmp: dict[str, Any], reports: list[tuple[str, dict[str, Any]]]) -> str:
    names = [r["name"] for r in cmp["runs"]]
    body = ["<h1>Batch-invariance comparison</h1><ol>"]
    body += [
        f"<li><code>{escape(r['name'])}</code> · model <code>{esc(r['model'])}</code>"
        + (f" · server says: {esc(r['server'])}" if r.get("server") else "")
        + "</li>"
        for r in cmp["runs"]
    ]
    body.append("</ol>")
    for c in cmp["canaries"]:
        named = [(n, e) for n, (_, r) in zip(names, reports, strict=True) for e in r["canaries"] if e["id"] == c["id"]]
        body.append(f"<h2>Canary <code>{escape(c['id'])}</code></h2><ul>")
        body += [f"<li>{escape(n)}: {esc(v)}</li>" for n, v in zip(names, c["verdicts"], strict=True)]
        body.append("</ul><table><tr><th>concurrency</th><th>figure</th>")
        body += [f"<th>{escape(n)}</th>" for n in names] + ["</tr>"]
        for lv in [{"concurrency": "overall", **c["overall"]}, *c["levels"]]:
            for k in FIGURES:
                cells = [
                    fmt(None if row is None else row[k]) + ("" if i == 0 or d is None else f" ({_signed(d[k])})")
                    for i, (row, d) in enumerate(zip(lv["runs"], lv["deltas"], strict=True))
                ]
                body.append(
                    f"<tr><td>{esc(lv['concurrency'])}</td><td class='l'>{k}</td>"
                    + "".join(f"<td>{escape(x)}</td>" for x in cells)
                    + "</tr>"
                )
        body.append("</table><div class='charts'>")
        body += [plots.unique_vs_level(named), plots.rate_vs_level(named), plots.drift_vs_level(named)]
        body += [plots.latency_vs_level(named), "</div>", cost_html(cmp, c)]
    return page("Batch-invariance comparison", "".join(body), cmp)


def write_comparison(cmp: dict[str, Any], reports: list[tuple[str, dict[str, Any]]], out_dir: Path) -> list[Path]:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunFolderError(f"--out {out_dir}: cannot create ({exc.strerror or exc})") from exc
    paths = [out_dir / "comparison.json", out_dir / "comparison.md", out_dir / "comparison.html"]
    write_text(paths[0], report_json(cmp))
    write_text(paths[1], render_markdown(cmp))
    write_text(paths[2], render_html(cmp, reports))
    return paths
