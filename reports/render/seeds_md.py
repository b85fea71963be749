"""``report.md``'s "Seed contracts" section: report.json's ``seed_contracts`` as one table (docs/rl.md).

Pure: the typed section in, Markdown lines out; text from the report escaped as every other cell.
"""

from __future__ import annotations

from reports.model.seeds import Rate, SeedContracts
from reports.render.mdtext import text


def _rate(r: Rate) -> str:
    if not r["n"]:
        return "—"
    ci = r["ci95"]
    shown = f" ({100 * ci[0]:.1f}–{100 * ci[1]:.1f}%)" if ci else ""
    return f"{r['k']}/{r['n']} = {100 * (r['rate'] or 0.0):.1f}%{shown}"


def seeds_md(contracts: SeedContracts | None) -> list[str]:
    """One row per contract and subject: its figure at the baseline, each level and over the sweep."""
    if not contracts:
        return []
    rows: list[tuple[str, str, Rate | None, list[Rate], Rate, str]] = []
    for s in contracts["same_seed"]:
        split = f"logits moved {s['logits_moved']}, draw only {s['draw_only']}, unclassified {s['unclassified']}"
        rows.append(
            ("same seed, other tokens", f"{s['canary']} (seed {s['seed']})", None, s["levels"], s["overall"], split)
        )
    for x in contracts["seeds"]:
        rows.append(
            (
                "different seeds, same completion",
                f"{x['family']} on {x['route']}",
                x["baseline"],
                x["levels"],
                x["overall"],
                x["verdict"],
            )
        )
    for c in contracts["choices"]:
        rows.append(
            (
                "n choices, duplicates",
                f"{c['canary']} (n = {c['n_choices']})",
                c["baseline"],
                c["levels"],
                c["overall"],
                c["verdict"],
            )
        )
    for r in contracts["routes"]:
        said = f"differing: {', '.join(r['differing'])}" if r["differing"] else r["note"] or "routes agree"
        rows.append(
            (
                "one seed, other route",
                f"{r['family']} seed {r['seed']} ({', '.join(r['routes'])})",
                r["baseline"],
                r["levels"],
                r["overall"],
                said,
            )
        )
    lines = [
        "### Seed contracts",
        "",
        "| contract | subject | baseline | by level | sweep | says |",
        "|---|---|---|---|---|---|",
    ]
    for contract, subject, base, levels, overall, said in rows:
        by_level = "; ".join(f"{lv['concurrency']}: {_rate(lv)}" for lv in levels) or "—"
        at_base = _rate(base) if base else "—"
        lines.append(f"| {contract} | {text(subject)} | {at_base} | {by_level} | {_rate(overall)} | {text(said)} |")
    return [*lines, ""]
