"""The shipped ``kv-offload`` matrix on the embedded engine, through ``loadgen matrix``: per canary where its KV came
from, proof that the asked path ran (or a flag where it did not), and the tier's effect on the same request.

Four cells: the shipped three (no tier, an exact bf16 tier, a lossy fp8 tier) and one whose tier is too small to
hold a single block, so it was asked for and never loaded anything back.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from loadgen.cli.progress.summary import read_summary
from scenarios import path_of

TINY = '\n[[matrix.cells]]\nname = "tier-tiny"\nkv_offload = { size_gib = 0.00001 }\n'  # 10 KiB: under one block


def _reports(out: Path) -> dict[str, dict[str, Any]]:
    return {p.parent.parent.name: orjson.loads(p.read_bytes()) for p in out.glob("cells/*/*/report.json")}


def _canary(report: dict[str, Any], cid: str) -> dict[str, Any]:
    return next(c for c in report["canaries"] if c["id"] == cid)


def _group(report: dict[str, Any], kind: str) -> dict[str, Any]:
    (effect,) = report["kv_effect"]
    return next(g for g in effect["groups"] if g["provenance"] == kind)


def test_the_kv_offload_matrix_says_where_each_canarys_kv_came_from_and_what_the_tier_did(tmp_path: Path) -> None:
    scenario = tmp_path / "kv-offload.toml"
    scenario.write_text(path_of("kv-offload").read_text().replace("baseline = 3", "baseline = 2") + TINY)
    out = tmp_path / "out"
    args = ["--out", str(out), "--levels", "0,2", "--canaries-per-level", "3", "--quiet"]
    done = subprocess.run(
        [sys.executable, "-m", "loadgen", "matrix", str(scenario), *args], capture_output=True, text=True, timeout=400
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reports = _reports(out)
    assert sorted(reports) == ["no-tier", "tier-bf16", "tier-fp8", "tier-tiny"]

    # no tier: the offload canary's path cannot run; every one of its records is flagged and none counts as offload
    none = reports["no-tier"]
    tier = _canary(none, "tier")["provenance"]
    assert tier["asked"] == "offload" and tier["proven"] == 0 and tier["not_proven"] == tier["records"] > 0
    assert [g["provenance"] for g in tier["groups"]] == ["computed"]
    assert any("Canary tier: path not proven" in n for n in none["run"]["notices"])
    assert "kv_offload" not in none["run"]
    assert {g["provenance"] for g in _canary(none, "gpu")["provenance"]["groups"]} >= {"gpu_prefix"}

    # the tiers: every offload canary onboarded its KV from the tier, proven by the engine's own step trace
    for cell in ("tier-bf16", "tier-fp8"):
        report = reports[cell]
        tier = _canary(report, "tier")["provenance"]
        assert tier["proven"] == tier["records"] > 0 and tier["not_proven"] == 0, (cell, tier)
        assert tier["evidence"] == {"engine_trace": tier["records"]}
        assert report["run"]["kv_offload"]["moved"] is True
        fresh = _canary(report, "fresh")["provenance"]["groups"]
        assert [g["provenance"] for g in fresh] == ["computed"]
    # alone, the exact tier's answers are the GPU hit's bit for bit; the fp8 tier's are not, and moved logprobs
    exact, lossy = _group(reports["tier-bf16"], "offload"), _group(reports["tier-fp8"], "offload")
    assert exact["answers"] > 0 and exact["bitwise_gpu_hit"] == exact["answers"]
    assert exact["max_logprob_drift_gpu_hit"] == 0
    assert lossy["answers"] > 0 and lossy["bitwise_gpu_hit"] == 0 and lossy["max_logprob_drift_gpu_hit"] > 0
    assert _group(reports["tier-fp8"], "gpu_prefix")["bitwise_gpu_hit"] == lossy["answers"]  # the hits agree
    assert "Same request, KV from elsewhere" in (next(out.glob("cells/tier-fp8/*/report.md"))).read_text()

    # a tier asked for that never loaded anything back: the run says so, and its offload canaries are flagged
    tiny = reports["tier-tiny"]
    assert tiny["run"]["kv_offload"]["moved"] is False and not tiny["run"]["kv_offload"]["load_bytes"]
    assert any("never" in n and "offload path" in n for n in tiny["run"]["notices"])
    assert _canary(tiny, "tier")["provenance"]["proven"] == 0

    # the comparison puts the cells side by side: the path's proof per canary and run, the tier's effect per run
    cmp = orjson.loads((out / "comparison.json").read_bytes())
    letter = {r["name"]: r["label"] for r in cmp["runs"]}
    tier_rows = {r["run"]: r for r in cmp["kv"]["sources"] if r["canary"] == "tier"}
    assert tier_rows["no-tier"]["not_proven"] == tier_rows["no-tier"]["records"] > 0
    assert tier_rows["tier-fp8"]["by_source"] == {"offload": tier_rows["tier-fp8"]["records"]}
    effect = {(r["run"], r["provenance"]): r for r in cmp["kv"]["effects"]}
    assert effect[("tier-bf16", "offload")]["bitwise_gpu_hit"] == exact["answers"]
    assert effect[("tier-fp8", "offload")]["bitwise_gpu_hit"] == 0 and effect[("tier-fp8", "offload")]["tier_moved"]
    assert f"| tier | {letter['no-tier']} | computed " in (out / "comparison.md").read_text()

    # and the terminal's summary says both, as `loadgen run` prints it
    def said(cell: str) -> list[str]:
        return read_summary(next(out.glob(f"cells/{cell}/*/report.json")).parent)

    assert any(line.startswith("KV: ") and "path not proven" in line for line in said("no-tier"))
    assert any(line.startswith("KV offload tier asked for, but it never") for line in said("tier-tiny"))
    assert not any("never" in line for line in said("tier-bf16") if line.startswith("KV"))
