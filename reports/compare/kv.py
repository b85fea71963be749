"""Where each run's canaries got their KV, run by run: the comparison's part for offload tiers and P/D hand-overs.

Why: a matrix with and without an offload tier (``scenarios/kv-offload.toml``) asks "did the tier's path run, and
did it change the answer?" per cell. Each run's report already says it (``canaries[i].provenance``, ``kv_effect``,
``run.kv_offload``: docs/design.md, "Where the KV came from"); this puts those blocks side by side: per canary and
run the records by source and the asked path's proof, and per run the same request's answers by source against
the GPU hit's and the computed answer, with whether an asked-for tier moved. Reports in, typed rows out; no I/O,
nothing recomputed.
"""

from __future__ import annotations

from reports.model.comparison import ComparedKv, KvEffectRow, KvSourceRow
from reports.model.report import Report


def compare_kv(names: list[str], reports: list[Report]) -> ComparedKv | None:
    """The rows, or None where no run's report says where any canary's KV came from."""
    sources: list[KvSourceRow] = []
    effects: list[KvEffectRow] = []
    for name, report in zip(names, reports, strict=True):
        tier = report["run"].get("kv_offload")
        for entry in report["canaries"]:
            block = entry.get("provenance")
            if block is None:
                continue
            sources.append(
                {
                    "canary": str(entry["id"]),
                    "run": name,
                    "records": block["records"],
                    "by_source": {g["provenance"]: g["completions"] for g in block["groups"]},
                    "asked": block["asked"],
                    "proven": block["proven"],
                    "not_proven": block["not_proven"],
                }
            )
        for effect in report.get("kv_effect") or []:
            for g in effect["groups"]:
                effects.append(
                    {
                        "run": name,
                        "provenance": g["provenance"],
                        "canaries": g["canaries"],
                        "answers": g["answers"],
                        "same_tokens": g["same_tokens"],
                        "bitwise_gpu_hit": g["bitwise_gpu_hit"],
                        "max_logprob_drift_gpu_hit": g["max_logprob_drift_gpu_hit"],
                        "max_logprob_drift": g["max_logprob_drift"],
                        "tier_moved": None if tier is None else tier["moved"],
                    }
                )
    if not sources and not effects:
        return None
    return {"sources": sources, "effects": effects}
