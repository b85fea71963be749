"""Where each canary's KV came from, whether the path it asked for ran, and its divergence grouped by that. Pure.

Why: an offload tier, a P/D hand-over or a prefix hit change where a prompt's KV comes from, and "recompute still
produces the same output": a canary that asked for a path and silently got another proves nothing about that path
(docs/design.md, "Where the KV came from"). Per canary record (ok, not warm-up) its prompt tokens by source, from the
first evidence that speaks:

- the engine step trace: the record's first scheduled row carries ``local`` and ``external`` (tokens found in the
  engine's own prefix cache, tokens loaded from outside it); on a prefill/decode run the decode server's rows (the
  trace file where the record was decoded) and the prefill server's (the other file) are read apart;
- else the engine's by-source counters (``tokens_computed``, ``tokens_local_hit``, ``tokens_external`` in
  ``engine_metrics*.jsonl``), the canary's own window alone: from the last sample before it was sent, the first
  move of their total, when it is exactly the record's ``prompt_tokens``, is its own (as
  ``reports.analysis.cache_checks.counter_evidence`` reads the prefix-cache counters); another move is "shared".

Its provenance: ``offload`` (any external tokens: a connector's tier), on a P/D decode server ``transfer`` (the
hand-over carried more of the prompt than the decoder's own hit), else ``gpu_prefix`` (any local hit), else
``computed``; ``unknown`` without evidence. Arrays in, typed blocks out; no I/O, and nothing here decides identity
or the reference (``reports.analysis.canary`` does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pandas as pd  # type: ignore[import-untyped]

from collectors.read.runfolder import KvSeries, RunData
from collectors.read.steps import StepTable
from loadgen.core.stats import ratio, wilson
from reports.analysis.cache_checks import own_windows
from reports.analysis.steps import trace_keys
from reports.model.provenance import CanaryProvenance, ProvenanceGroup, UnprovenRecord

Floats = npt.NDArray[np.float64]
Objects = npt.NDArray[np.object_]
LABELS: Final = ("computed", "gpu_prefix", "offload", "transfer", "unknown")
# the asked path -> the provenances that prove it
ASKED: Final[dict[str, frozenset[str]]] = {
    "offload": frozenset({"offload"}),
    "transfer": frozenset({"transfer"}),
    "gpu_prefix or offload": frozenset({"gpu_prefix", "offload"}),
}
LISTED_MAX: Final = 200


@dataclass(frozen=True)
class Split:
    """Per canary row, its prompt tokens by source (NaN: unknown) and the evidence that said so (``none``,
    ``engine_trace``, ``counters``, or ``shared``: the counters moved with others' tokens in the window)."""

    computed: Floats
    local: Floats
    external: Floats
    evidence: Objects

    @staticmethod
    def unknown(n: int) -> Split:
        return Split(np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan), np.full(n, "none", dtype=object))

    @property
    def known(self) -> npt.NDArray[np.bool_]:
        return np.isfinite(self.local) & np.isfinite(self.external)


def counter_split(sent: Floats, ended: Floats, prompt: Floats, kv: KvSeries | None) -> Split:
    """What one engine's by-source counters say of each canary: its own window alone (see the module doc)."""
    out = Split.unknown(len(sent))
    if kv is None:
        return out
    parts = np.stack([kv.computed, kv.local, kv.external])
    keep = np.isfinite(kv.t) & np.isfinite(parts).all(axis=0)
    t, parts = kv.t[keep], parts[:, keep]
    if t.size < 2:
        return out
    for i, window in enumerate(own_windows(t, parts.sum(axis=0), sent, ended)):
        if window is None:
            continue
        b, e, moved = window
        if (np.diff(parts[:, b : e + 1], axis=1) < 0).any():  # a counter went down: the engine restarted
            continue
        delta = parts[:, moved] - parts[:, b]
        if np.isfinite(prompt[i]) and delta.sum() == prompt[i]:
            out.computed[i], out.local[i], out.external[i] = delta
            out.evidence[i] = "counters"
        else:
            out.evidence[i] = "shared"
    return out


def side_counters(sent: Floats, ended: Floats, prompt: Floats, series: Sequence[KvSeries]) -> Split:
    """The counters of a side of several servers: the one server whose own window holds the canary; two that
    both claim it, or only moves shared with others, are "shared"."""
    splits = [counter_split(sent, ended, prompt, kv) for kv in series]
    if len(splits) == 1:
        return splits[0]
    out = Split.unknown(len(sent))
    for i in range(len(sent)):
        own = [s for s in splits if s.evidence[i] == "counters"]
        if len(own) == 1:
            out.computed[i], out.local[i], out.external[i] = own[0].computed[i], own[0].local[i], own[0].external[i]
            out.evidence[i] = "counters"
        elif own or any(s.evidence[i] == "shared" for s in splits):
            out.evidence[i] = "shared"
    return out


def trace_split(table: StepTable, request_ids: Objects, *, pd_run: bool) -> tuple[Split, Split]:
    """From the step trace: per canary row, the answering engine's split (one engine's, or on a P/D run the decode
    server's) and the prefill server's (P/D only; unknown otherwise). A record's rows in one trace file are one
    engine's; its first row there carries ``local``/``external`` (-1 in a trace without them: unknown). On P/D the
    decode server's file is the one where the record was decoded past its first token (else its latest row's)."""
    n = len(request_ids)
    answer, prefill = Split.unknown(n), Split.unknown(n)
    where: dict[object, list[int]] = {}
    for i, rid in enumerate(request_ids.tolist()):
        where.setdefault(rid, []).append(i)  # an n > 1 request's choice records share its id and its prompt
    if not table.rows or not where or len(table.file) != table.rows:
        return answer, prefill
    sel = np.flatnonzero(np.fromiter((k in where for k in table.key.tolist()), bool, count=table.rows))
    if not sel.size:
        return answer, prefill
    codes, keys = pd.factorize(table.key[sel])
    order = np.lexsort((table.step[sel], table.file[sel], codes))
    rows, code, file = sel[order], codes[order], table.file[sel][order]
    starts = np.flatnonzero(np.r_[True, (code[1:] != code[:-1]) | (file[1:] != file[:-1])])
    decoded = (table.computed[rows] + table.scheduled[rows] > table.prompt[rows]).astype(np.int64)
    beyond = np.maximum.reduceat(decoded, starts) > 0  # per (record, file): decoded past the first token there
    last_t = np.maximum.reduceat(table.t[rows], starts)
    head = rows[starts]  # per (record, file): its first row there
    groups: dict[int, list[int]] = {}
    for g, c in enumerate(code[starts].tolist()):
        groups.setdefault(c, []).append(g)

    def put(split: Split, g: int, rid: object) -> None:
        r = int(head[g])
        local, external = int(table.local[r]), int(table.external[r])
        if local < 0 or external < 0:
            return
        for i in where[rid]:
            split.local[i], split.external[i] = local, external
            split.computed[i] = int(table.prompt[r]) - local - external
            split.evidence[i] = "engine_trace"

    for c, gs in groups.items():
        rid = keys[c]
        if not pd_run:
            put(answer, min(gs, key=lambda g: float(table.t[head[g]])), rid)
            continue
        dec = max(gs, key=lambda g: (bool(beyond[g]), float(last_t[g])))
        if len(gs) == 1 and not beyond[dec]:  # one engine's rows, not decoded there: the prefill leg alone
            put(prefill, dec, rid)
            continue
        put(answer, dec, rid)
        if rest := [g for g in gs if g != dec]:
            put(prefill, min(rest, key=lambda g: float(table.t[head[g]])), rid)
    return answer, prefill


def first_known(*splits: Split) -> Split | None:
    """Per row the first split that knows it; the evidence of the first that said anything (``shared``) else; None
    of none (a split holds values only where its evidence knows them, so one split is its own answer)."""
    if len(splits) <= 1:
        return splits[0] if splits else None
    n = len(splits[0].evidence)
    out = Split.unknown(n)
    done = np.zeros(n, bool)
    for s in splits:
        take = ~done & np.isin(s.evidence, ["engine_trace", "counters"])
        for mine, theirs in ((out.computed, s.computed), (out.local, s.local), (out.external, s.external)):
            mine[take] = theirs[take]
        out.evidence[take] = s.evidence[take]
        done |= take
    for s in splits:
        said = ~done & (s.evidence != "none")
        out.evidence[said] = s.evidence[said]
        done |= said
    return out


def labels(split: Split, *, transfer_side: bool) -> Objects:
    """Each row's provenance: external tokens are a tier's load (``offload``); on a P/D decode server
    (``transfer_side``) the hand-over (``transfer``) only where it carried more of the prompt than the decoder's own
    prefix hit: a decoder takes the tail past its own hit from the prefiller whatever that hit was (vLLM 0.26 with
    NIXL: a hit of 736 of 737 tokens, 1 handed over), so any external token would call every decoder hit a
    transfer; else a local hit is ``gpu_prefix``; else ``computed``; ``unknown`` without evidence."""
    out = np.full(len(split.evidence), "unknown", dtype=object)
    known = split.known
    out[known & (split.local <= 0) & (split.external <= 0)] = "computed"
    out[known & (split.local > 0)] = "gpu_prefix"
    if transfer_side:
        out[known & (split.external > 0) & (split.external > split.local)] = "transfer"
    else:
        out[known & (split.external > 0)] = "offload"
    return out


def asked_path(cache: str | None, expect_cache: str | None, *, pd_run: bool) -> str | None:
    """The path a canary asked for: ``cache = "offload"``, a P/D run's hand-over, or any hit for ``expect_cache =
    "hit"``; None where it asked for none."""
    if cache == "offload":
        return "offload"
    if pd_run:
        return "transfer"
    return "gpu_prefix or offload" if expect_cache == "hit" else None


def reason(asked: str, actual: str) -> str:
    """Why an asked path is not proven, in the words a reader looks for."""
    if asked == "transfer":
        return {"computed": "decoder re-prefilled", "gpu_prefix": "decoder's own GPU hit instead of a transfer"}.get(
            actual, f"{actual} instead of a transfer"
        )
    if actual == "computed":
        return "computed instead"
    if asked == "offload" and actual == "gpu_prefix":
        return "GPU hit instead of offload"
    return f"{actual} instead of {asked}"


@dataclass(frozen=True)
class ProvenanceRows:
    """Per canary row (the frame's order): its provenance, evidence and tokens by source as the answering engine
    saw them, the prefill server's split on a P/D run, and the path its canary asked for (None: none)."""

    label: Objects
    split: Split
    prefill: Split
    asked: Objects
    pd_run: bool


def provenance_rows(
    frame: Any,
    scenario: Mapping[str, Any],
    *,
    trace: StepTable | None,
    engine_kv: KvSeries | None,
    decode_kv: Sequence[KvSeries] = (),
    prefill_kv: Sequence[KvSeries] = (),
    pd_run: bool = False,
) -> ProvenanceRows:
    """Every canary row's provenance (see the module doc). ``engine_kv``: the endpoint's counters (one engine);
    ``decode_kv``/``prefill_kv``: a P/D run's servers' on each side."""
    n = len(frame)
    sent = frame["sent_at"].to_numpy(dtype=float)
    ended = sent + frame["latency_s"].to_numpy(dtype=float)
    prompt = frame["prompt_tokens"].to_numpy(dtype=float)
    # (answering engine's, prefill server's) from each source the run has, in order of trust: only those are built
    sources: list[tuple[Split, Split | None]] = []
    if trace is not None:
        keys = trace_keys(trace, frame["request_id"].to_numpy(dtype=object), frame["answer_id"].to_numpy(dtype=object))
        answer, before = trace_split(trace, keys, pd_run=pd_run)
        sources.append((answer, before if pd_run else None))
    if pd_run and (decode_kv or prefill_kv):
        sources.append((side_counters(sent, ended, prompt, decode_kv), side_counters(sent, ended, prompt, prefill_kv)))
    elif not pd_run and engine_kv is not None:
        sources.append((counter_split(sent, ended, prompt, engine_kv), None))
    split, prefill = first_known(*[a for a, _ in sources]), first_known(*[b for _, b in sources if b is not None])
    if split is None or prefill is None:  # no source: one unknown split serves both (nothing writes to it)
        blank = Split.unknown(n)
        split, prefill = split or blank, prefill or blank
    specs = {str(c.get("id", "canary")): c for c in scenario.get("canaries") or []}
    asked = np.array(
        [
            asked_path(spec.get("cache"), spec.get("expect_cache"), pd_run=pd_run)
            if (spec := specs.get(str(cid))) is not None
            else None
            for cid in frame["canary_id"].tolist()
        ],
        dtype=object,
    )
    return ProvenanceRows(labels(split, transfer_side=pd_run), split, prefill, asked, pd_run)


def group(label: Objects, fd: npt.NDArray[np.int64], dmax: Floats, *, referred: bool) -> list[ProvenanceGroup]:
    """Completions grouped by provenance (``LABELS`` order), each against the canary's reference: diverged of N
    with a 95% Wilson interval, first divergence min/median, the largest logprob drift."""
    out: list[ProvenanceGroup] = []
    for name in LABELS:
        sel = label == name
        n = int(sel.sum())
        if not n:
            continue
        div = sel & (fd >= 0)
        k = int(div.sum())
        ci = wilson(k, n)
        drift = dmax[sel & np.isfinite(dmax)]
        out.append(
            {
                "provenance": name,
                "completions": n,
                "diverged": k if referred else None,
                "divergence_rate": ratio(k, n) if referred else None,
                "divergence_rate_ci95": list(ci) if ci is not None and referred else None,
                "first_divergence": {"min": int(fd[div].min()), "median": float(np.median(fd[div]))} if k else None,
                "max_logprob_drift": float(drift.max()) if drift.size else None,
            }
        )
    return out


def section(
    rows: ProvenanceRows,
    at: npt.NDArray[np.int64],
    compared: npt.NDArray[np.bool_],
    fd: npt.NDArray[np.int64],
    dmax: Floats,
    *,
    referred: bool,
    frame: Any,
) -> CanaryProvenance | None:
    """One canary's block: its rows ``at`` of the frame (send order), of which ``compared`` (ok, not warm-up) count,
    with each one's first divergence ``fd`` and largest logprob drift ``dmax`` against the canary's reference.
    None where no record has evidence and the canary asked for no path."""
    idx = at[compared]
    label, asked = rows.label[idx], rows.asked[idx]
    want = next((a for a in asked.tolist() if a is not None), None)
    evidence = rows.split.evidence[idx]
    if want is None and (label == "unknown").all():
        return None
    proven = np.array([lab in ASKED[want] for lab in label.tolist()], dtype=bool) if want else np.zeros(len(idx), bool)
    refuted = ~proven & (label != "unknown") if want else np.zeros(len(idx), bool)
    reasons: dict[str, int] = {}
    listed: list[UnprovenRecord] = []
    phase = frame["phase"].to_numpy(dtype=object)[idx]
    level = frame["level"].to_numpy()[idx]
    rid = frame["request_id"].to_numpy(dtype=object)[idx]
    for j in np.flatnonzero(refuted).tolist():
        why = reason(str(want), str(label[j]))
        reasons[why] = reasons.get(why, 0) + 1
        if len(listed) < LISTED_MAX:
            lv = level[j]
            listed.append(
                {
                    "request_id": str(rid[j]),
                    "phase": str(phase[j]),
                    "level": None if lv is None or (isinstance(lv, float) and np.isnan(lv)) else int(lv),
                    "provenance": label[j],
                    "reason": why,
                }
            )
    return {
        "records": len(idx),
        "evidence": {str(k): int(v) for k, v in sorted(pd.Series(evidence).value_counts().items())},
        "asked": want,
        "proven": int(proven.sum()),
        "not_proven": int(refuted.sum()),
        "unknown": int((label == "unknown").sum()) if want else 0,
        "reasons": dict(sorted(reasons.items())),
        "not_proven_records": listed,
        "listed_max": LISTED_MAX,
        "groups": group(label, fd[compared], dmax[compared], referred=referred),
    }


def provenance_notices(canaries: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per canary whose asked path is not proven: how many, and why."""
    out = []
    for c in canaries:
        p = c.get("provenance")
        if not p or not p["asked"]:
            continue
        if p["not_proven"]:
            why = ", ".join(f"{k} ×{v}" for k, v in p["reasons"].items())
            out.append(
                f"Canary {c['id']}: path not proven for {p['not_proven']} of {p['records']} records, which asked for "
                f"{p['asked']} ({why}): they are left out of that path's figures."
            )
        if p["unknown"] and (p["asked"] == "offload" or p["unknown"] < p["records"]):  # asked outright, or partly known
            out.append(
                f"Canary {c['id']}: {p['unknown']} of {p['records']} records asked for {p['asked']}, but neither an "
                "engine step trace with local/external nor the engine's by-source counters say where their KV came "
                "from: the path is unproven."
            )
    return out


def of_run(run: RunData) -> ProvenanceRows:
    """Every canary row's provenance in ``run``: a run with a decode server behind its endpoint reads each side's
    servers apart."""
    pd_run = any(s.role == "decode" for s in run.servers)
    side = {r: [s.kv for s in run.servers if s.kv is not None and s.role in (r, "both")] for r in ("prefill", "decode")}
    return provenance_rows(
        run.canaries.frame,
        run.manifest.scenario,
        trace=run.steps,
        engine_kv=run.engine_kv,
        decode_kv=side["decode"],
        prefill_kv=side["prefill"],
        pd_run=pd_run,
    )
