"""report.json's ``seed_contracts`` where a person reads them: report.md's and report.html's "Seed contracts"
table and the end-of-run summary's lines (docs/rl.md).

Why one module: the three say the same rows in the same words (``rows``), each escaped as its medium escapes
(Markdown through ``reports.render.mdtext``, HTML through ``reports.render.htmltext``, the terminal by the
summary's ``visible``). A row is broken when its figure counts any completion at any scope; gating the rates is
``loadgen check``'s. Pure: the typed section in, lines or HTML out; no analysis, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from reports.model.seeds import Rate, SeedContracts
from reports.render.cells import pct
from reports.render.htmltext import escape
from reports.render.mdtext import text


@dataclass(frozen=True)
class Row:
    """One contract and subject: its figure at the baseline (None where the contract has none), each level and
    over the sweep, and what it says."""

    contract: str
    subject: str
    baseline: Rate | None
    levels: list[Rate]
    overall: Rate
    says: str

    @property
    def broken(self) -> bool:
        return any(r["k"] for r in [*([self.baseline] if self.baseline else []), *self.levels, self.overall])


def rows(contracts: SeedContracts) -> list[Row]:
    out: list[Row] = []
    for s in contracts["same_seed"]:
        split = f"logits moved {s['logits_moved']}, draw only {s['draw_only']}, unclassified {s['unclassified']}"
        subject = f"{s['canary']} (seed {s['seed']})"
        out.append(Row("same seed, other tokens", subject, None, s["levels"], s["overall"], split))
    for x in contracts["seeds"]:
        subject = f"{x['family']} on {x['route']}"
        out.append(
            Row("different seeds, same completion", subject, x["baseline"], x["levels"], x["overall"], x["verdict"])
        )
    for c in contracts["choices"]:
        subject = f"{c['canary']} (n = {c['n_choices']})"
        out.append(Row("n choices, duplicates", subject, c["baseline"], c["levels"], c["overall"], c["verdict"]))
    for r in contracts["routes"]:
        said = f"differing: {', '.join(r['differing'])}" if r["differing"] else r["note"] or "routes agree"
        subject = f"{r['family']} seed {r['seed']} ({', '.join(r['routes'])})"
        out.append(Row("one seed, other route", subject, r["baseline"], r["levels"], r["overall"], said))
    return out


def rate_cell(r: Rate | None) -> str:
    if r is None or not r["n"]:
        return "—"
    ci = r["ci95"]
    shown = f" ({pct(ci[0]).rstrip('%')}–{pct(ci[1])})" if ci else ""
    return f"{r['k']}/{r['n']} = {pct(r['rate'])}{shown}"


def _by_level(row: Row) -> str:
    return "; ".join(f"{lv['concurrency']}: {rate_cell(lv)}" for lv in row.levels) or "—"


WARN = ' class="warn"'
HEAD = ("contract", "subject", "baseline", "by level", "sweep", "says")


def seeds_md(contracts: SeedContracts | None) -> list[str]:
    """One table row per contract and subject."""
    if not contracts:
        return []
    lines = ["### Seed contracts", "", "| " + " | ".join(HEAD) + " |", "|---|---|---|---|---|---|"]
    for r in rows(contracts):
        cells = [r.contract, text(r.subject), rate_cell(r.baseline), _by_level(r), rate_cell(r.overall), text(r.says)]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def seeds_html(contracts: SeedContracts | None) -> str:
    """The same table; a broken row marked ``class="warn"``."""
    if not contracts:
        return ""
    head = "".join(f"<th>{h}</th>" for h in HEAD)
    body = "".join(
        f"<tr{WARN if r.broken else ''}><td class='l'>{escape(r.contract)}</td>"
        f"<td class='l'>{escape(r.subject)}</td><td>{escape(rate_cell(r.baseline))}</td>"
        f"<td class='l'>{escape(_by_level(r))}</td><td>{escape(rate_cell(r.overall))}</td>"
        f"<td class='l'>{escape(r.says)}</td></tr>"
        for r in rows(contracts)
    )
    return f"<h2>Seed contracts</h2><table class='seeds'><tr>{head}</tr>{body}</table>"


def seeds_summary(contracts: SeedContracts | None) -> list[str]:
    """The end-of-run summary's lines: one per broken contract and subject, or one saying every one held."""
    if not contracts:
        return []
    all_rows = rows(contracts)
    broken = [r for r in all_rows if r.broken]
    if not broken:
        return [f"Seed contracts held: none of {len(all_rows)} broken at any level."]
    return [
        f"Seed contract broken: {r.contract}: {r.subject}: {rate_cell(r.overall)} over the sweep; {r.says}"
        for r in broken
    ]


def sampled_forks(contracts: SeedContracts | None, canary: str) -> str | None:
    """For a sampled canary, what its forks table says instead of the near-tie classes: the seed contract's split
    of its mismatches (``reports.analysis.seed_contracts``, the one owner of the rule); None for a greedy one or
    one that never forked."""
    found = [s for s in (contracts["same_seed"] if contracts else []) if s["canary"] == canary]
    if not found or not found[0]["overall"]["k"]:  # greedy, or nothing forked: no table either
        return None
    s = found[0]
    return (
        f"Sampled canary (seed {s['seed']}): the near-tie test reads a greedy choice, so its forks are classed by "
        f"the seed contract: of {s['overall']['k']} over the sweep, {s['logits_moved']} after a chosen-token "
        f"logprob moved (the batch changed the numerics), {s['draw_only']} with every logprob before the fork "
        f"unchanged (only the draw differed), {s['unclassified']} without logprobs to tell."
    )
