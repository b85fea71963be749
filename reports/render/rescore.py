"""The re-score check in report.md and report.html: per canary and level, alone and at level, whether the
re-scored logprobs were bitwise the decode's.

Consumes ``report.json``'s ``rescore`` section only (``reports.model.rescore``); builds the rows once and writes
them as a markdown table (escaped by ``reports.render.mdtext``) and an HTML one (``html.escape``). A side with
nothing re-scored says "unmeasured" and why, never 0%. No analysis, no I/O.
"""

from __future__ import annotations

from html import escape

from reports.model.rescore import RescoreCheck, RescoreSide, Spread
from reports.render.cells import fmt, rate_cell
from reports.render.mdtext import text

HEAD = (
    "level",
    "re-scored",
    "bitwise equal",
    "mismatch rate (95% CI)",
    "first mismatch min/median/max",
    "largest |Δ logprob|",
    "top-k distance median/max",
    "unmeasured",
)
INTRO = (
    "Re-score check: each completion's prompt and output ids sent back teacher-forced, alone after the load and at "
    "its level right after it; bitwise equal means every output position's logprob is the decode's. Top-k distance: "
)


def _spread(s: Spread | None) -> str:
    return "—" if s is None else f"{fmt(s['min'])} / {fmt(s['median'])} / {fmt(s['max'])}"


def _row(level: str, side: RescoreSide) -> tuple[str, ...]:
    unmeasured = ", ".join(f"{k} {n}" for k, n in side["unmeasured"].items()) or "0"
    rate = rate_cell(side["mismatch"]["rate"], side["mismatch"]["ci95"]) if side["rescored"] else "unmeasured"
    return (
        level,
        f"{side['rescored']} of {side['completions']}",
        str(side["bitwise_equal"]),
        rate,
        _spread(side["first_mismatch"]),
        fmt(side["max_abs_delta"]),
        "—" if side["topk_tv"] is None else f"{fmt(side['topk_tv']['median'])} / {fmt(side['topk_tv']['max'])}",
        unmeasured,
    )


def rows(section: RescoreCheck) -> list[tuple[str, list[tuple[str, ...]]]]:
    """Per canary, its rows: each level's alone and at-level re-scores."""
    out = []
    for entry in section["canaries"]:
        table = []
        for lv in entry["levels"]:
            where = "baseline" if lv["phase"] == "baseline" else f"concurrency {lv['concurrency']}"
            table += [_row(f"{where}, alone", lv["alone"]), _row(f"{where}, at level", lv["at_level"])]
        out.append((entry["canary"], table))
    return out


def rescore_md(section: RescoreCheck | None) -> list[str]:
    if not section:
        return []
    lines = ["", "### Re-score check", "", text(INTRO + section["topk_distance"] + "."), ""]
    for canary, table in rows(section):
        lines += [f"Canary `{text(canary)}`:", "", "| " + " | ".join(HEAD) + " |", "|---" * len(HEAD) + "|"]
        lines += ["| " + " | ".join(text(c) for c in row) + " |" for row in table]
        lines.append("")
    return lines


def rescore_html(section: RescoreCheck | None) -> str:
    if not section:
        return ""
    parts = [f"<h2>Re-score check</h2><p class='meta'>{escape(INTRO + section['topk_distance'])}.</p>"]
    for canary, table in rows(section):
        head = "".join(f"<th>{escape(h)}</th>" for h in HEAD)
        body = "".join(
            ("<tr class='warn'>" if row[3] == "unmeasured" else "<tr>")
            + "".join(f"<td>{escape(c)}</td>" for c in row)
            + "</tr>"
            for row in table
        )
        parts.append(f"<h3>Canary <code>{escape(canary)}</code></h3><table><tr>{head}</tr>{body}</table>")
    return "".join(parts)
