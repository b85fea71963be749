"""The same request answered alone with its KV from different places: does the source change the answer? Pure.

Why: each canary's "Where the KV came from" block (``reports.analysis.provenance``) compares a canary's records
with that canary's own reference, so a tier that changes every answer it serves the same way shows no
divergence there: the tier canary's reference is itself a tier answer. The question the tier raises is across
canaries: the scenario sends one request computed, from the GPU prefix cache and from the offload tier
(``kv-offload``), and an exact tier must give the GPU hit's answer bit for bit (both prefill only the suffix on
the same cached KV), a lossy one may not. So records are grouped by their request body (``request_key``: equal
but for a cache salt), across canary ids, and only those sent alone (level 0: baseline and sweep level 0, no
burst copy) count, so that the batch around them cannot be what moved. Per group of provenance: how many
answers have the reference's tokens, how many are bitwise equal to it (tokens and every logprob), the largest
logprob difference before the first token that differs, and that first position. The reference is the modal
completion of the computed answers, else of the first provenance present (``provenance.LABELS`` order); where
GPU prefix hits are among them, each group is also held against the modal GPU-hit answer, bitwise and by drift.
Columns in, typed blocks out; no I/O. Identity is ``reports.analysis.identity``'s rule; nothing here picks a
canary's own reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.read.columns import CanaryColumns
from collectors.read.matrices import wide
from loadgen.core.identity import reference_index
from reports.analysis.identity import Identity, choose, first_divergence_rows
from reports.analysis.provenance import LABELS, Objects
from reports.model.provenance import KvEffect, KvEffectGroup

Rows = npt.NDArray[np.int64]
Ints = npt.NDArray[np.int64]


def alone_rows(cols: CanaryColumns, label: Objects) -> Rows:
    """Rows answered ok, sent alone (level 0, not warm-up, not a burst copy), whose provenance is known."""
    f = cols.frame
    keep = (
        (f["status"].to_numpy() == "ok")
        & (f["phase"].to_numpy() != "warmup")
        & (f["level"].to_numpy() == 0)
        & ~f["burst"].to_numpy(dtype=bool)
        & (label != "unknown")
    )
    return np.flatnonzero(keep)


def kv_effect(cols: CanaryColumns, label: Objects) -> list[KvEffect]:
    """One block per request body answered alone from at least two KV sources, in first-send order."""
    rows = alone_rows(cols, label)
    keys = cols.frame["request_key"].to_numpy(dtype=object)[rows]
    sent = cols.frame["sent_at"].to_numpy(dtype=float)[rows]
    order = np.argsort(sent, kind="stable")
    rows, keys = rows[order], keys[order]
    out: list[KvEffect] = []
    for key in dict.fromkeys(keys.tolist()):
        at = rows[keys == key]
        present = [name for name in LABELS if (label[at] == name).any()]
        if len(present) < 2:
            continue
        out.append(_block(cols, at, label[at], present))
    return out


@dataclass(frozen=True)
class _Ref:
    """A reference answer: its identity row (padded) and its logprobs."""

    seq: npt.NDArray[np.int64]
    lp: npt.NDArray[np.float64]


def _reference(cols: CanaryColumns, ident: Identity, at: Rows, mine: Rows) -> int:
    """The modal answer among ``mine`` (indices into ``at``), the earliest on a tie."""
    seqs = [tuple(ident.mat[ident.mrows[i], : ident.lengths[i]].tolist()) for i in mine.tolist()]
    return int(mine[reference_index(seqs) or 0])


def _against(cols: CanaryColumns, ident: Identity, at: Rows, sel: Rows, ref: _Ref) -> tuple[Ints, int, float | None]:
    """Each selected answer's first divergence from ``ref`` (-1: none), how many are bitwise equal to it, and the
    largest logprob difference before each first divergence."""
    fd = first_divergence_rows(ident.mat, ident.mrows[sel], ref.seq)
    width = ident.mat.shape[1]
    drift: list[float] = []
    bitwise = 0
    for j, k in zip(sel.tolist(), fd.tolist(), strict=True):
        lp = cols.logprobs[at[j]]  # a float32 row against the widened reference: float64 arithmetic, exact
        if k < 0 and np.array_equal(lp, ref.lp, equal_nan=True):
            bitwise += 1
        w = min(lp.shape[0], ref.lp.shape[0], k if k >= 0 else width)
        diff = np.abs(lp[:w] - ref.lp[:w])
        diff = diff[np.isfinite(diff)]
        if diff.size:
            drift.append(float(diff.max()))
    return fd, bitwise, max(drift) if drift else None


def _block(cols: CanaryColumns, at: Rows, label: Objects, present: list[str]) -> KvEffect:
    ident = choose(cols, at)
    canary = cols.frame["canary_id"].to_numpy(dtype=object)
    refs = {}
    for name in dict.fromkeys([present[0], "gpu_prefix"]):
        if name in present:
            r = _reference(cols, ident, at, np.flatnonzero(label == name))
            refs[name] = (r, _Ref(ident.mat[ident.mrows[r]], wide(cols.logprobs[at[r]])))
    base = present[0]
    groups: list[KvEffectGroup] = []
    for name in present:
        sel = np.flatnonzero(label == name)
        fd, bitwise, drift = _against(cols, ident, at, sel, refs[base][1])
        moved = fd[fd >= 0]
        hit = _against(cols, ident, at, sel, refs["gpu_prefix"][1]) if "gpu_prefix" in refs else None
        groups.append(
            {
                "provenance": name,  # type: ignore[typeddict-item]  # a LABELS member
                "canaries": sorted({str(canary[at[j]]) for j in sel.tolist()}),
                "answers": len(sel),
                "same_tokens": int((fd < 0).sum()),
                "bitwise": bitwise,
                "max_logprob_drift": drift,
                "first_divergence": int(moved.min()) if moved.size else None,
                "bitwise_gpu_hit": None if hit is None else hit[1],
                "max_logprob_drift_gpu_hit": None if hit is None else hit[2],
            }
        )
    return {
        "request_key": str(cols.frame["request_key"].to_numpy(dtype=object)[at[0]]),
        "reference": base,  # type: ignore[typeddict-item]
        "reference_canary": str(canary[at[refs[base][0]]]),
        "groups": groups,
    }
