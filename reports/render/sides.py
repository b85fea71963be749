"""The prefill/decode part of the rendered reports: divergence by each side's load, the heatmap, the rule's sentence.

Consumes the report only (a canary's ``sides``, ``reports.model.coresidency.Sides``); Markdown for ``report.md`` and the
terminal, HTML for ``report.html``, the same tables in both. Every string that came from outside went through
the report's own builders (numbers and fixed words only here), but the HTML escapes every cell anyway.
"""

from __future__ import annotations

from reports.model.coresidency import CoResidencyGroup, Sides, SidesHeatmap
from reports.render.htmltext import escape
from reports.render.svg_heatmap import heatmap

SIDE_WORDS = {
    "prefill": "prefill-side load (other requests on the prefill server(s) over each canary's prefill window, "
    "sent .. first token)",
    "decode": "decode-side load (other requests on the decode server(s) over each canary's decode life, "
    "first token .. end)",
}


def _fmt(v: object) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"


def _ci(v: list[float] | None) -> str:
    return "—" if not v or len(v) != 2 else f"{100 * v[0]:.1f}–{100 * v[1]:.1f}%"


def _rows(groups: list[CoResidencyGroup]) -> list[list[str]]:
    return [
        [
            str(g["others"]),
            str(g["canaries"]),
            str(g["unique_completions"]),
            _fmt(g["diverged"]),
            f"{_pct(g['divergence_rate'])} ({_ci(g['divergence_rate_ci95'])})",
            _fmt(g["earliest_divergence"]),
        ]
        for g in groups
    ]


HEAD = ["others", "canaries", "unique", "diverged", "rate (95% CI)", "first divergence"]


def _grid(h: SidesHeatmap) -> tuple[list[str], list[list[str]]]:
    head = ["prefill \\ decode", *map(str, h["decode_others"])]
    rows = [
        [str(p), *(f"{k}/{n}" if n else "—" for k, n in zip(ks, ns, strict=True))]
        for p, ks, ns in zip(h["prefill_others"], h["diverged"], h["completions"], strict=True)
    ]
    return head, rows


def sides_md(sides: Sides) -> list[str]:
    """``report.md``'s prefill/decode section of one canary."""
    out = [f"Prefill/decode: the background loads the {sides['loaded']} side."]
    if follows := sides.get("follows"):
        out[0] += f" **{follows['sentence']}**"
    out.append("")
    for side, groups in (("prefill", sides["prefill"]), ("decode", sides["decode"])):
        out.append(f"Divergence by {SIDE_WORDS[side]}, per-canary median:")
        out.append("")
        if not groups:
            out += ["Unmeasured: no /metrics sample of that side's servers fell in any canary's window.", ""]
            continue
        out += ["| " + " | ".join(HEAD) + " |", "|---:|---:|---:|---:|---|---:|"]
        out += ["| " + " | ".join(r) + " |" for r in _rows(groups)]
        out.append("")
    if h := sides.get("heatmap"):
        head, rows = _grid(h)
        out += ["Diverged / completions by prefill-side others (rows) and decode-side others (columns):", ""]
        out += ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        out.append("")
    return out


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def sides_html(sides: Sides) -> str:
    """``report.html``'s prefill/decode section of one canary: the two tables, the grid and its heatmap."""
    follows = sides.get("follows")
    parts = [
        f"<h3>Prefill and decode sides</h3><p class='meta'>The background loads the {escape(sides['loaded'])} side.</p>"
    ]
    if follows:
        parts.append(f"<p class='verdict'>{escape(follows['sentence'])}</p>")
    for side, groups in (("prefill", sides["prefill"]), ("decode", sides["decode"])):
        parts.append(f"<p class='meta'>Divergence by {escape(SIDE_WORDS[side])}, per-canary median.</p>")
        parts.append(_table(HEAD, _rows(groups)) if groups else "<p>Unmeasured on this side.</p>")
    if h := sides.get("heatmap"):
        head, rows = _grid(h)
        parts.append(_table(head, rows))
        chart_rows = [(f"p {p}", list(r)) for p, r in zip(h["prefill_others"], h["rate"], strict=True)]
        ticks = [(i, str(d)) for i, d in enumerate(h["decode_others"])]
        title = "Divergence rate by prefill-side and decode-side others"
        parts.append(heatmap(title, chart_rows, ticks, "decode-side others", "prefill-side others", "rate"))
    return "".join(parts)
