"""The seed contracts of sampled canaries (issue 55): same seed same tokens, different seeds different
completions, n choices distinct, one seed the same tokens on every route; each at the baseline and every level.

Why apart from ``reports.analysis.canary``: a canary's own figures compare it with its own reference; these
compare canaries with each other (the seeds of a set, the routes of one seed, the choices of one request), so
completions are labelled across canaries by one identity (``reports.analysis.identity.choose`` over all of
them). The same-seed figure is the canary's divergence against its seeded baseline, re-read as a contract and
split by whether the logits moved before the fork. Pure: columns and the resolved scenario in, the typed
``reports.model.seeds`` section out; no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.read.runfolder import CanaryColumns
from loadgen.core.stats import ratio, wilson
from reports.analysis import identity as ident
from reports.analysis.kernels import first_drift, group_rows
from reports.model.report import CanaryAnalysis
from reports.model.seeds import Choices, Rate, Routes, SameSeed, SeedContracts, SeedSet

TEXT_ROUTES = ("completions", "generate")  # routes that take the prompt as text; chat renders it through a template


@dataclass(frozen=True)
class Spec:
    """A resolved scenario canary as these contracts read it."""

    id: str
    family: str | None
    route: str
    temperature: float
    seed: int | None
    n: int

    @classmethod
    def of(cls, raw: Mapping[str, Any], endpoint_kind: str) -> Spec:
        kind = raw.get("kind") or ("chat" if raw.get("messages") else endpoint_kind)
        return cls(
            id=str(raw.get("id")),
            family=raw.get("family"),
            route=str(kind),
            temperature=float(raw.get("temperature") or 0.0),
            seed=raw.get("seed"),
            n=int(raw.get("n") or 1),
        )


def rate(k: int, n: int, concurrency: int | None = None) -> Rate:
    ci = wilson(k, n)
    return {
        "concurrency": concurrency,
        "n": n,
        "k": k,
        "rate": ratio(k, n) if n else None,
        "ci95": list(ci) if ci is not None else None,
    }


class _Rows:
    """Completed rows (ok, not warm-up) with one identity label across every canary."""

    def __init__(self, cols: CanaryColumns) -> None:
        f = cols.frame
        keep = (f["status"].to_numpy() == "ok") & (f["phase"].to_numpy() != "warmup")
        self.rows = np.flatnonzero(keep).astype(np.int64)
        identity = ident.choose(cols, self.rows)
        self.label, _ = group_rows(identity.mat, identity.mrows)
        self.canary = f["canary_id"].to_numpy().astype(str)[self.rows]
        self.phase = f["phase"].to_numpy()[self.rows]
        self.level = f["level"].to_numpy()[self.rows]
        self.request = f["request_id"].to_numpy().astype(str)[self.rows]
        self.sweep_levels = sorted(set(self.level[self.phase == "sweep"].tolist()))

    def scopes(self, sel: npt.NDArray[np.bool_]) -> list[tuple[int | None, npt.NDArray[np.bool_]]]:
        """(None, baseline), then (level, that level's sweep rows) for every level, then (None, the sweep)."""
        sweep = sel & (self.phase == "sweep")
        out: list[tuple[int | None, npt.NDArray[np.bool_]]] = [(None, sel & (self.phase == "baseline"))]
        out += [(int(lv), sweep & (self.level == lv)) for lv in self.sweep_levels]
        return [*out, (None, sweep)]


def _figures(scopes: list[tuple[int | None, npt.NDArray[np.bool_]]], k_of: Any) -> tuple[Rate, list[Rate], Rate]:
    """Baseline, levels, overall from ``k_of(scope mask) -> (k, n)``."""
    out = []
    for level, mask in scopes:
        k, n = k_of(mask)
        out.append(rate(k, n, level))
    return out[0], out[1:-1], out[-1]


def seed_sets(r: _Rows, specs: Sequence[Spec]) -> list[SeedSet]:
    groups: dict[tuple[str, str], list[Spec]] = defaultdict(list)
    for s in specs:
        if s.family is not None and s.seed is not None and s.temperature > 0:
            groups[(s.family, s.route)].append(s)
    out: list[SeedSet] = []
    for (family, route), members in groups.items():
        seeds = sorted({s.seed for s in members if s.seed is not None})
        if len(seeds) < 2:
            continue
        seed_of = {s.id: s.seed for s in members}
        sel = np.isin(r.canary, list(seed_of))
        row_seed = np.array([seed_of.get(c, -1) for c in r.canary])

        def collided(mask: npt.NDArray[np.bool_], row_seed: npt.NDArray[Any] = row_seed) -> tuple[int, int]:
            seen: dict[int, set[int]] = defaultdict(set)
            for lab, sd in zip(r.label[mask].tolist(), row_seed[mask].tolist(), strict=True):
                seen[lab].add(sd)
            k = sum(len(seen[lab]) > 1 for lab in r.label[mask].tolist())
            return k, int(mask.sum())

        base, levels, overall = _figures(r.scopes(sel), collided)
        every = [x for x in [base, overall] if x["n"]]
        if every and all(x["k"] == x["n"] for x in every):
            verdict = f"seed ignored on {route}: every completion was the same whatever the seed ({seeds})"
        elif any(x["k"] for x in every):
            verdict = f"seeds collided on {route}: some completions of different seeds were the same"
        else:
            verdict = f"seeds honoured on {route}: different seeds gave different completions"
        out.append(
            {
                "family": family,
                "route": route,
                "seeds": seeds,
                "baseline": base,
                "levels": levels,
                "overall": overall,
                "verdict": verdict,
            }
        )
    return out


def choices(r: _Rows, specs: Sequence[Spec]) -> list[Choices]:
    out: list[Choices] = []
    for s in specs:
        if s.n < 2:
            continue
        ids = [f"{s.id}.choice{j}" for j in range(s.n)]
        sel = np.isin(r.canary, ids)

        def duplicates(mask: npt.NDArray[np.bool_]) -> tuple[int, int]:
            seen: set[tuple[str, int]] = set()
            k = 0
            for req, lab in zip(r.request[mask].tolist(), r.label[mask].tolist(), strict=True):
                k += (req, lab) in seen
                seen.add((req, lab))
            return k, int(mask.sum())

        base, levels, overall = _figures(r.scopes(sel), duplicates)
        dup = sum(x["k"] for x in [base, overall])
        verdict = (
            f"duplicate choices: {dup} choice(s) repeated an earlier choice of the same request"
            if dup
            else f"choices distinct: every one of the {s.n} choices differed within its request"
        )
        out.append(
            {
                "canary": s.id,
                "n_choices": s.n,
                "baseline": base,
                "levels": levels,
                "overall": overall,
                "verdict": verdict,
            }
        )
    return out


def routes(r: _Rows, specs: Sequence[Spec]) -> list[Routes]:
    groups: dict[tuple[str, int | None], list[Spec]] = defaultdict(list)
    for s in specs:
        if s.family is not None:
            groups[(s.family, s.seed)].append(s)
    out: list[Routes] = []
    for (family, seed), members in groups.items():
        names = [s.route for s in members]
        if len(set(names)) < 2:
            continue
        text = [s for s in members if s.route in TEXT_ROUTES]
        chat = [s.route for s in members if s.route not in TEXT_ROUTES]
        note = (
            "chat renders the prompt through the model's chat template, so its tokens are compared with no other "
            "route; its seed is checked by its seeds set"
            if chat
            else ""
        )
        first, rest = (text[0], text[1:]) if len(text) > 1 else (None, [])
        ref_label = -1
        if first is not None:
            base_first = (r.canary == first.id) & (r.phase == "baseline")
            labs = r.label[base_first]
            if labs.size:
                ref_label = int(np.bincount(labs).argmax())
        route_of = {s.id: s.route for s in rest}
        sel = np.isin(r.canary, list(route_of))

        def differ(mask: npt.NDArray[np.bool_], ref: int = ref_label) -> tuple[int, int]:
            return (int((r.label[mask] != ref).sum()) if ref >= 0 else 0), (int(mask.sum()) if ref >= 0 else 0)

        base, levels, overall = _figures(r.scopes(sel), differ)
        differing = (
            sorted(
                {
                    route_of[c]
                    for c, lab in zip(r.canary[sel].tolist(), r.label[sel].tolist(), strict=True)
                    if lab != ref_label
                }
            )
            if ref_label >= 0
            else []
        )
        out.append(
            {
                "family": family,
                "seed": seed,
                "routes": names,
                "compared": [s.route for s in rest],
                "baseline": base,
                "levels": levels,
                "overall": overall,
                "differing": differing,
                "note": note,
            }
        )
    return out


def same_seed(cols: CanaryColumns, specs: Sequence[Spec], canaries: Sequence[CanaryAnalysis]) -> list[SameSeed]:
    """Each sampled canary's divergence against its seeded baseline, per level, with its forks split by whether
    a chosen-token logprob moved before them."""
    by_id = {s.id: s for s in specs}
    out: list[SameSeed] = []
    for entry in canaries:
        cid = str(entry["id"])
        spec = by_id.get(cid) or by_id.get(cid.rsplit(".choice", 1)[0])
        if spec is None or spec.temperature <= 0:
            continue
        levels = [
            rate(int(lv["diverged"] or 0), int(lv["completions"]), int(lv["concurrency"])) for lv in entry["levels"]
        ]
        ov = entry["overall"]
        moved, draw, unknown = _fork_split(cols, cid, entry["reference"]["request_id"])
        seed = spec.seed
        if spec.n > 1 and seed is not None and ".choice" in cid:
            seed += int(cid.rsplit(".choice", 1)[1])  # vLLM seeds choice j with seed + j
        out.append(
            {
                "canary": cid,
                "seed": seed,
                "levels": levels,
                "overall": rate(int(ov["diverged"] or 0), int(ov["completions"])),
                "logits_moved": moved,
                "draw_only": draw,
                "unclassified": unknown,
            }
        )
    return out


def _fork_split(cols: CanaryColumns, cid: str, ref_request: str | None) -> tuple[int, int, int]:
    """The sweep's mismatches of ``cid`` against its reference: (logits moved before the fork, draw only, no
    logprobs to tell)."""
    f = cols.frame
    mine = (f["canary_id"].to_numpy().astype(str) == cid) & (f["status"].to_numpy() == "ok")
    rows = np.flatnonzero(mine & (f["phase"].to_numpy() == "sweep")).astype(np.int64)
    ref_rows = np.flatnonzero(mine & (f["request_id"].to_numpy().astype(str) == str(ref_request)))
    if ref_request is None or ref_rows.size == 0 or rows.size == 0:
        return 0, 0, 0
    ref = int(ref_rows[0])
    both = np.concatenate([[ref], rows])
    identity = ident.choose(cols, both)
    fd = ident.first_divergence_rows(identity.mat, identity.mrows[1:], identity.mat[identity.mrows[0]])
    div = fd >= 0
    if identity.kind == "text" or cols.logprobs.shape[1] == 0:
        return 0, 0, int(div.sum())
    ref_lp = cols.logprobs[ref]
    moved_at = first_drift(cols.logprobs, rows[div], ref_lp, fd[div])
    has_lp = ~np.isnan(cols.logprobs[rows[div], 0]) if cols.logprobs.shape[1] else np.zeros(int(div.sum()), bool)
    moved = int(((moved_at >= 0) & has_lp).sum())
    unknown = int((~has_lp).sum())
    return moved, int(div.sum()) - moved - unknown, unknown


def section(
    cols: CanaryColumns, scenario: Mapping[str, Any], canaries: Sequence[CanaryAnalysis]
) -> SeedContracts | None:
    """The seed contracts of the run; None when no canary samples (a greedy run has none)."""
    endpoint_kind = str((scenario.get("endpoint") or {}).get("kind") or "completions")
    specs = [Spec.of(c, endpoint_kind) for c in scenario.get("canaries") or []]
    if not any(s.temperature > 0 for s in specs) or cols.n == 0:
        return None
    r = _Rows(cols)
    return {
        "same_seed": same_seed(cols, specs, canaries),
        "seeds": seed_sets(r, specs),
        "choices": choices(r, specs),
        "routes": routes(r, specs),
    }
