"""The run's reference completion beside one canary record, position by position (``side_by_side.md``).

Token id, token, logprob and top alternatives of both at every position, the logprob difference, and
the first divergence marked: the whole table for ``side_by_side.md``, a few rows of it for the README.

Pure: two raw records in, rows and Markdown out; every token goes through ``mdtext``. It never finds
the first divergence itself: ``reports.repro.choice`` gives it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reports.render import mdtext
from reports.repro.choice import Choice


def side_by_side(
    record: dict[str, Any], reference: dict[str, Any] | None, first_div: int | None
) -> list[dict[str, Any]]:
    """Position by position: the reference's and this record's token id, token, logprob and top two
    alternatives, and ``mark`` ("first divergence" at the report's position, "after" past it)."""
    a = _seqs(reference or {})
    b = _seqs(record)
    width = max(a["n"], b["n"])
    out = []
    for p in range(width):
        ref_lp, lp = _at(a["logprobs"], p), _at(b["logprobs"], p)
        delta = lp - ref_lp if isinstance(lp, float) and isinstance(ref_lp, float) else None
        out.append(
            {
                "position": p,
                "reference_id": _at(a["ids"], p),
                "reference_token": _at(a["tokens"], p),
                "reference_logprob": ref_lp,
                "reference_top": _at(a["top"], p),
                "id": _at(b["ids"], p),
                "token": _at(b["tokens"], p),
                "logprob": lp,
                "top": _at(b["top"], p),
                "logprob_delta": delta,
                "mark": None
                if first_div is None
                else "first divergence"
                if p == first_div
                else "after"
                if p > first_div
                else None,
            }
        )
    return out


def _seqs(r: dict[str, Any]) -> dict[str, Any]:
    ids, tokens, lps, top = (r.get(k) for k in ("token_ids", "tokens", "logprobs", "top_logprobs"))
    seqs = [s for s in (ids, tokens, lps, top) if isinstance(s, list)]
    return {
        "ids": ids if isinstance(ids, list) else None,
        "tokens": tokens if isinstance(tokens, list) else None,
        "logprobs": lps if isinstance(lps, list) else None,
        "top": top if isinstance(top, list) else None,
        "n": max((len(s) for s in seqs), default=0),
    }


def _at(seq: list[Any] | None, p: int) -> Any:
    if seq is None or p >= len(seq):
        return None
    v = seq[p]
    return None if isinstance(v, float) and not np.isfinite(v) else v


def side_by_side_md(
    choice: Choice, table: list[dict[str, Any]], first_div: int | None, rows: range | None = None
) -> str:
    head = (
        "| position | reference id | reference token | reference logprob | id | token | logprob | Δ logprob | |\n"
        "|---:|---:|---|---:|---:|---|---:|---:|---|\n"
    )
    body = []
    for r in table if rows is None else [table[i] for i in rows if 0 <= i < len(table)]:
        mark = "**← first divergence**" if r["mark"] == "first divergence" else ""
        body.append(
            f"| {r['position']} | {_cell(r['reference_id'])} | {mdtext.code(token_text(r['reference_token']))} | "
            f"{_lp(r['reference_logprob'])} | {_cell(r['id'])} | {mdtext.code(token_text(r['token']))} | "
            f"{_lp(r['logprob'])} | "
            f"{_lp(r['logprob_delta'])} | {mark} |"
        )
    if rows is not None:
        return head + "\n".join(body) + "\n"
    unit = choice.reference["unit"]
    where = "none" if first_div is None else f"{unit} {first_div}"
    intro = (
        f"# Canary `{choice.canary_id}` record {choice.number}: beside the reference\n\n"
        f"Compared by {choice.reference['identity']}; first divergence: {where}. Δ logprob is this record's logprob "
        "minus the reference's at the same position (0 means bitwise equal).\n\n"
    )
    return intro + head + "\n".join(body) + "\n"


def token_text(v: Any) -> str | None:
    """A recorded token as text for ``mdtext.code`` (``None`` where the position has none)."""
    return None if v is None else str(v)


def _cell(v: Any) -> str:
    return "—" if v is None else mdtext.text(v)


def _lp(v: Any) -> str:
    if isinstance(v, float | int) and not isinstance(v, bool):
        return "0" if v == 0 else f"{v:.6g}"
    return "—"
