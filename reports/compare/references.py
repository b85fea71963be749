"""Each run's reference completion against another run's: which runs' references differ, and where.

Why: a matrix over engine configurations asks whether a configuration answers as the reference one
does, before any load: a prefill/decode pair with a foreign prefill kernel may decode every canary
the same way (no divergence inside its run) and still answer otherwise than the colocated engine.
The figures side by side (``reports.compare.runs``) cannot show that; this does, per canary: the run's
reference completion (``report.json`` ``canaries[].reference``: the modal baseline completion) against
the reference of the run it is compared with (``loadgen matrix``: the first cell, a cell's
``compare_to``, or, for a decoder's phases, its first phase), and the first position where the two
differ. Completions are compared by their token strings (``reference.tokens``; by characters of
``reference.text`` where either run compared by text); two distinct token ids with the same string
would look alike. Pure: reports in, ``reports.model.report.ReferenceCheck`` rows and sentences out.
"""

from __future__ import annotations

from collections.abc import Sequence

from reports.model.comparison import ReferenceCheck
from reports.model.report import Canary, Report


def _first_difference(a: Sequence[str | None], b: Sequence[str | None]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _at(seq: Sequence[str | None], i: int | None) -> str | None:
    return None if i is None or i >= len(seq) else seq[i]


def check(canary: str, run: str, base: str, mine: Canary | None, theirs: Canary | None) -> ReferenceCheck:
    """``mine``'s reference against ``theirs``' (the same canary in two runs)."""
    row: ReferenceCheck = {
        "canary": canary,
        "run": run,
        "compared_with": base,
        "verdict": "no reference",
        "first_divergence": None,
        "unit": "token",
        "token": None,
        "reference_token": None,
    }
    if mine is None or theirs is None:
        row["verdict"] = "not in both runs"
        return row
    if mine["reference"]["length"] is None or theirs["reference"]["length"] is None:
        return row
    a, b = mine["reference"], theirs["reference"]
    by_text = "character" in (a.get("unit"), b.get("unit"))
    ours: Sequence[str | None] = list(a["text"] or "") if by_text else a["tokens"]
    ref: Sequence[str | None] = list(b["text"] or "") if by_text else b["tokens"]
    at = _first_difference(ours, ref)
    if at is None and not by_text and a["text"] != b["text"]:
        row["verdict"] = "diverged"  # the same tokens as far as the report keeps them, another text beyond
        return row
    row.update(
        {
            "verdict": "same" if at is None else "diverged",
            "first_divergence": at,
            "unit": "character" if by_text else "token",
            "token": _at(ours, at),
            "reference_token": _at(ref, at),
        }
    )
    return row


def reference_checks(reports: list[tuple[str, Report]], bases: dict[str, str]) -> list[ReferenceCheck]:
    """For every run named in ``bases`` (run name -> the name of the run it is compared with), every canary of
    either run: its reference against the base run's. Runs not in ``bases`` (the base itself) get no rows."""
    by_name = dict(reports)
    rows: list[ReferenceCheck] = []
    for name, report in reports:
        base = bases.get(name)
        if base is None or base == name or base not in by_name:
            continue
        mine = {c["id"]: c for c in report["canaries"]}
        theirs = {c["id"]: c for c in by_name[base]["canaries"]}
        for cid in sorted(mine.keys() | theirs.keys()):
            rows.append(check(cid, name, base, mine.get(cid), theirs.get(cid)))
    return rows


def broke(rows: list[ReferenceCheck]) -> list[str]:
    """One sentence per run whose reference differs from its base's, naming the canaries and positions. Neither run
    is blamed: the base may be the one that moved (a prefix-cache cell's reference against a cache-off cell's)."""
    by_run: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        if r["verdict"] == "diverged":
            where = "" if r["first_divergence"] is None else f" at {r['unit']} {r['first_divergence']}"
            by_run.setdefault((r["run"], r["compared_with"]), []).append(f"{r['canary']}{where}")
    return [f"{run}'s reference differs from {base}'s: {', '.join(items)}" for (run, base), items in by_run.items()]


def said(rows: list[ReferenceCheck]) -> list[str]:
    """What the reference rows say in sentences: which run broke which reference (``broke``), which pairs of runs
    have no canary in common, and "every run's reference completions equal …" only where references were compared
    and all were the same."""
    pairs: dict[tuple[str, str], list[ReferenceCheck]] = {}
    for r in rows:
        pairs.setdefault((r["run"], r["compared_with"]), []).append(r)
    apart = [
        f"{run} and {base} have no canary in common: their references cannot be compared"
        for (run, base), got in pairs.items()
        if all(r["verdict"] == "not in both runs" for r in got)
    ]
    out = broke(rows) + apart
    if out:
        return out
    if any(r["verdict"] == "same" for r in rows):
        return ["every run's reference completions equal those of the run it is compared with"]
    return ["no reference completions to compare (no run's baseline gave one)"]
