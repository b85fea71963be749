"""Live per-level figures while a run is going: canaries, errors, unique, diverged, rate, earliest divergence.

Why: a user watching the web UI should see determinism break as it happens, not only in the final report.
Workers send tiny completion summaries (``summarise``, a ``loadgen.load.messages.CanaryDone``: a hash per
identity kind the completion carries and, once the reference is known, the first-divergence position per
kind); the coordinator folds them here. Identity, divergence and the reference are ``loadgen.core.identity``'s
rules, applied per canary as the report applies them (the strongest kind every completion so far carried; the
modal baseline completion, the earliest first on a tie: baseline canaries come from the one canary user, one
at a time, so they arrive in the order they were sent), so the live table and the report agree
(``tests/loadgen/load/test_live_matches_report.py``). The divergence rate and its interval are
``loadgen.core.stats``'s, written as the report writes them (``reports.render.cells.rate_cell``); **held at
send** is the record's ``background_held_at_send`` (the background slots, over every process, that held a
started request when the cell's last canary went out, of the level), as progress shows it. The columns only the
finished report has (drift max, bitwise equal, others, **held throughout**: they need each canary's logprobs
against the reference and the engine's measured co-residency over its life) read ``PENDING`` until the report
is written, then its own cells (``with_report``, ``reports.render.cells.level_cells``). Pure: no Locust, no
I/O. The final report is the authority.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loadgen.core.identity import (
    KINDS,
    IdentityKind,
    choose_kind,
    first_divergence,
    identities,
    identity_hash,
    reference_index,
)
from loadgen.core.record import Phase, Status
from loadgen.core.stats import ratio, wilson
from loadgen.load.messages import CanaryDone
from reports.model.report import Report
from reports.render.cells import level_cells, rate_cell

References = dict[str, dict[IdentityKind, list[Any]]]  # canary -> kind -> reference completion (msgpack-safe)
PENDING = "at the end"  # a report-only cell while the run goes (module docstring)
REPORT_ONLY = ("drift_max", "bitwise", "others", "held_throughout")


def summarise(
    *,
    canary: str,
    stage: int,
    phase: Phase,
    level: int | None,
    status: Status,
    token_ids: Sequence[int] | None,
    tokens: Sequence[str] | None,
    text: str | None,
    reference: dict[IdentityKind, list[Any]] | None,
    background_held: int | None = None,
) -> CanaryDone:
    """One canary completion as the coordinator needs it (``lg_done``)."""
    ok = status == "ok"
    idents = identities(token_ids, tokens, text) if ok else {}
    first_div: dict[str, int | None] = {}
    for kind, seq in idents.items():
        if reference is not None and kind in reference:
            first_div[kind] = first_divergence(seq, tuple(reference[kind]))
    return CanaryDone(
        stage=stage,
        canary=canary,
        phase=phase,
        level=level,
        status=status,
        hashes={kind: identity_hash(seq) for kind, seq in idents.items()},
        identity={kind: list(seq) for kind, seq in idents.items()} if phase == "baseline" else None,
        first_div=first_div if reference is not None else None,
        held_at_send=background_held,
    )


@dataclass
class Cell:
    canaries: int = 0
    errors: int = 0
    hashes: dict[str, set[str]] = field(default_factory=dict)  # kind -> distinct completions
    diverged: Counter[str] = field(default_factory=Counter)  # kind -> diverged completions
    earliest: dict[str, int] = field(default_factory=dict)  # kind -> earliest first divergence
    held_at_send: int | None = None  # the last canary's background slots held at its send, where recorded


@dataclass
class CanaryKinds:
    """How many ok completions of a canary carried each identity: decides the kind it is compared by."""

    completions: int = 0
    with_ids: int = 0
    with_tokens: int = 0

    @property
    def kind(self) -> IdentityKind:
        return choose_kind(self.completions, self.with_ids, self.with_tokens)


class LiveTable:
    """Folds canary completion summaries into per-(canary, level) cells; picks the baseline reference."""

    def __init__(self) -> None:
        self.cells: dict[tuple[str, str], Cell] = {}  # (canary, "baseline" or level) -> cell
        self.kinds: dict[str, CanaryKinds] = {}
        self._baseline: dict[str, dict[str, list[str]]] = {}  # canary -> kind -> hashes, in arrival order
        self._identity: dict[str, dict[str, dict[str, list[Any]]]] = {}  # canary -> kind -> hash -> completion
        self.references: References = {}

    def add(self, done: CanaryDone) -> None:
        phase = done.phase
        if phase == "warmup":
            return  # counted in no figure
        canary = done.canary
        cell = self.cells.setdefault((canary, "baseline" if phase == "baseline" else str(done.level)), Cell())
        cell.canaries += 1
        if phase == "sweep" and done.held_at_send is not None:
            cell.held_at_send = done.held_at_send
        hashes = done.hashes
        if done.status != "ok" or not hashes:
            cell.errors += 1
            return
        kinds = self.kinds.setdefault(canary, CanaryKinds())
        kinds.completions += 1
        kinds.with_ids += "token_ids" in hashes
        kinds.with_tokens += "tokens" in hashes
        for kind, h in hashes.items():
            cell.hashes.setdefault(kind, set()).add(h)
        if phase == "baseline" and done.identity:
            for kind, h in hashes.items():
                self._baseline.setdefault(canary, {}).setdefault(kind, []).append(h)
                self._identity.setdefault(canary, {}).setdefault(kind, {}).setdefault(h, done.identity[kind])
        if phase == "sweep" and done.first_div:
            for kind, first in done.first_div.items():
                if first is not None:
                    cell.diverged[kind] += 1
                    cell.earliest[kind] = min(first, cell.earliest.get(kind, first))

    def choose_references(self) -> References:
        """The modal baseline completion per canary and kind (earliest first on a tie), once the baseline is in."""
        for canary, per_kind in self._baseline.items():
            if canary in self.references:
                continue
            refs: dict[IdentityKind, list[Any]] = {}
            for kind in KINDS:
                hashes = per_kind.get(kind, [])
                if (at := reference_index(hashes)) is not None:
                    refs[kind] = self._identity[canary][kind][hashes[at]]
            self.references[canary] = refs
        return self.references

    def diverged(self, canary: str, level: int | None) -> int | None:
        """Completions of ``canary`` at sweep ``level`` that diverged from the reference, by the identity the
        canary is compared by (as ``rows`` counts them); None before the reference is known."""
        cell = self.cells.get((canary, str(level)))
        if canary not in self.references or cell is None:
            return None
        kind = self.kinds[canary].kind if canary in self.kinds else "text"
        return cell.diverged[kind]

    def rows(self) -> list[dict[str, Any]]:
        def order(key: tuple[str, str]) -> tuple[str, int]:
            return key[0], -1 if key[1] == "baseline" else int(key[1])

        out = []
        for (c, lvl), cell in sorted(self.cells.items(), key=lambda kv: order(kv[0])):
            kind = self.kinds[c].kind if c in self.kinds else "text"
            compared = lvl != "baseline" and c in self.references
            diverged: int | str = cell.diverged[kind] if compared else "—"
            rate, ci95 = None, None
            if compared:  # the baseline is the reference: no rate
                completions = cell.canaries - cell.errors
                rate = ratio(cell.diverged[kind], completions)
                interval = wilson(cell.diverged[kind], completions)
                ci95 = list(interval) if interval is not None else None
            later = "—" if lvl == "baseline" else PENDING
            held = cell.held_at_send
            out.append(
                {
                    "canary": c,
                    "level": lvl,
                    "canaries": cell.canaries,
                    "errors": cell.errors,
                    "unique": len(cell.hashes.get(kind, ())),
                    "diverged": diverged,
                    "rate": rate_cell(rate, ci95) if lvl != "baseline" else "—",
                    "earliest": cell.earliest.get(kind, "—"),
                    **dict.fromkeys(REPORT_ONLY, later),
                    "held_at_send": f"{held}/{lvl}" if lvl not in ("baseline", "0") and held is not None else "—",
                    "identity": kind,
                }
            )
        return out


def with_report(rows: list[dict[str, Any]], report: Report | None) -> list[dict[str, Any]]:
    """``rows`` of a run that ended, with each sweep level's report-only cells, and its rate, as its report writes
    them (``reports.render.cells.level_cells``); a row the report has no level for (the baseline), or every row where
    there is no report, gets no figure there."""
    canaries = report["canaries"] if report is not None else []
    levels = {(str(c["id"]), str(lv["concurrency"])): lv for c in canaries for lv in c["levels"]}
    out = []
    for row in rows:
        lv = levels.get((str(row["canary"]), str(row["level"])))
        out.append({**row, **dict.fromkeys(REPORT_ONLY, "—")} if lv is None else {**row, **level_cells(lv)})
    return out
