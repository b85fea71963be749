"""Which canary record a reproducer is of, and the report's reference and first divergence for it.

``loadgen repro RUN_DIR --canary ID [--record N]`` names a record; ``select`` finds it among the run's
canary columns with the reference it is judged against, for ``reports.repro.folder`` to build the folder from.

Numbering (``--record N``): the records of one canary, every phase (warm-up, baseline, sweep) and
failures included, in the report's canonical order (send time, then request id), counted from 1.
The reference and the first divergence are the report's own (``reports.analysis.canary``: the modal
baseline completion, else the modal sweep completion; ``reports.analysis.identity``: ids, else token
strings, else text), never recomputed another way.

Pure: a loaded run in, a ``Choice`` out. Never reads the raw records (the CLI does) and builds no file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from collectors.read.runfolder import RunData
from loadgen.core.errors import UsageError
from loadgen.core.identity import first_divergence, identities
from loadgen.core.stats import num
from reports.analysis import coresidency
from reports.analysis import identity as ident
from reports.analysis.build import with_engine_join
from reports.analysis.canary import CanaryView, canonical_order


@dataclass(frozen=True)
class Choice:
    """One canary record picked out of a run, with the report's reference and divergence for it."""

    canary_id: str
    number: int  # 1-based among the canary's records, canonical order, every phase and status
    total: int  # records of this canary
    row: int  # row in the run's canary columns
    request_id: str
    file: str  # the canaries*.jsonl file it was read from
    ref_row: int | None
    ref_request_id: str | None
    ref_file: str | None
    reference: dict[str, Any]  # kind, identity, unit, completions, unique_completions, self_consistent
    first_divergence: int | None  # from the report's analysis (completions of baseline and sweep)
    compared: bool  # the record is one of the completions the report compares with the reference
    counts: dict[str, int]  # records, completions, diverged, errors, warmup
    co_residency: dict[str, Any]  # measured for this record (reports.analysis.coresidency)


def select(run: RunData, canary_id: str, record: int | None) -> Choice:
    """The ``record``-th record of ``canary_id`` (1-based), or by default its first divergent one.

    Raises ``UsageError`` naming the run folder, the option and what was expected."""
    where = str(run.run_dir)
    cols = with_engine_join(run)
    ids = cols.frame["canary_id"].astype(str).to_numpy()
    known = sorted(set(ids.tolist()))
    if canary_id not in known:
        listed = ", ".join(known) if known else "none: the run holds no canary record"
        raise UsageError(f"{where}: --canary {canary_id!r}: no such canary in this run (expected one of: {listed})")
    rows = canonical_order(cols, np.flatnonzero(ids == canary_id).astype(np.int64))
    c = CanaryView(cols, rows)
    total = len(rows)
    diverged = c.comp & (c.fd >= 0)
    counts = {
        "records": total,
        "completions": int(c.comp.sum()),
        "diverged": int(diverged.sum()) if c.ref is not None else 0,
        "errors": int((~c.ok).sum()),
        "warmup": int((c.phase == "warmup").sum()),
    }
    if record is None:
        hits = np.flatnonzero(diverged)
        if c.ref is None or len(hits) == 0:
            why = "no completion to take a reference from" if c.ref is None else "none diverged from the reference"
            raise UsageError(
                f"{where}: --canary {canary_id!r}: {why} ({counts['records']} records: {counts['completions']} "
                f"completions compared, {counts['diverged']} diverged, {counts['errors']} errors, "
                f"{counts['warmup']} warm-up); expected a divergent record, or pick one with --record N (1..{total})"
            )
        i = int(hits[0])
    else:
        if not 1 <= record <= total:
            raise UsageError(
                f"{where}: --record {record}: canary {canary_id!r} has {total} record(s) (expected 1..{total}, "
                "counted in send order, every phase and failure included)"
            )
        i = record - 1
    frame = cols.frame
    row = int(rows[i])
    ref_row = None if c.ref is None else int(rows[c.ref])
    ref = _reference_summary(c)
    return Choice(
        canary_id=canary_id,
        number=i + 1,
        total=total,
        row=row,
        request_id=str(frame["request_id"].iloc[row]),
        file=str(frame["file"].iloc[row]),
        ref_row=ref_row,
        ref_request_id=None if ref_row is None else str(frame["request_id"].iloc[ref_row]),
        ref_file=None if ref_row is None else str(frame["file"].iloc[ref_row]),
        reference=ref,
        first_divergence=int(c.fd[i]) if bool(c.comp[i]) and c.fd[i] >= 0 else None,
        compared=bool(c.comp[i]) and c.ref is not None,
        counts=counts,
        co_residency=_co_residency(c.co, i, frame, row),
    )


def _reference_summary(c: CanaryView) -> dict[str, Any]:
    pool = c.ref_pool
    return {
        "kind": c.ref_kind if c.ref is not None else None,
        "identity": c.identity.kind,
        "unit": c.identity.unit,
        "identity_note": ident.note(c.identity),
        "completions": int(pool.sum()),
        "unique_completions": len(np.unique(c.label[pool])) if pool.any() else 0,
        "self_consistent": (len(np.unique(c.label[pool])) == 1)
        if c.ref is not None and c.ref_kind == "baseline"
        else None,
    }


def _co_residency(m: coresidency.Measured, i: int, frame: Any, row: int) -> dict[str, Any]:
    samples = frame["engine_samples"].iloc[row] if "engine_samples" in frame else 0
    held = m.held[i]
    return {
        "source": coresidency.SOURCE_NAMES.get(int(m.source[i])),
        "min": coresidency.whole(m.lo[i]),
        "median": num(m.med[i]),
        "max": coresidency.whole(m.hi[i]),
        "expected": int(m.expected[i]),
        "held": None if np.isnan(held) else bool(held == 1.0),
        "metrics_samples": int(samples),
    }


def resolved_divergence(choice: Choice, record: dict[str, Any], reference: dict[str, Any] | None) -> int | None:
    """The first divergence of ``record`` from the reference: the report's where it compares the record
    (baseline and sweep completions), else (a warm-up record) by the same identity, per completion."""
    if choice.compared or reference is None or record.get("status") != "ok":
        return choice.first_divergence
    kind = choice.reference["identity"]
    mine = identities(record.get("token_ids"), record.get("tokens"), record.get("text"))
    theirs = identities(reference.get("token_ids"), reference.get("tokens"), reference.get("text"))
    if kind not in mine or kind not in theirs:
        return None
    return first_divergence(mine[kind], theirs[kind])
