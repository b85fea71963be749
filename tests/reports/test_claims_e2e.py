"""End to end through the real CLI on the embedded engine: ``loadgen run --claim-max-rate 0.3`` (n = 9
canaries per level), then ``loadgen check --claim-max-rate 0.3`` (in this process). A batch-invariant engine
never diverges: every level gets its 9 canaries, the claim holds everywhere and the gate passes. The default engine
diverges under load: the level where it does ends early (fewer than 9 canaries, recorded in the manifest),
its claim is impossible, the clean level got all 9, the integrity checks still pass and the gate fails
naming that level. Either way the run's own terminal summary says where the claim holds and which level its rule
ended early."""

from __future__ import annotations

import json
from pathlib import Path

from tests.loadgen.cli.clikit import RealRun, loadgen, loadgen_run

SCENARIO = """
name = "claims-e2e"
[[canaries]]
id = "story"
prompt = "The history of the old harbour town begins with"
max_tokens = {tokens}
[sweep]
levels = [0, 8]
canaries_per_level = 2
warmup = 1
baseline = 2
"""


def _run(tmp_path: Path, name: str, tokens: int, *engine: str) -> RealRun:
    engine_args = [f"--engine-arg={a}" for a in engine]
    scenario = SCENARIO.format(tokens=tokens)
    done = loadgen_run(scenario, tmp_path / name, "--claim-max-rate", "0.3", *engine_args, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def test_batch_invariant_run_supports_the_claim(tmp_path: Path) -> None:
    ran = _run(tmp_path, "invariant", 16, "--batch-invariant")
    run_dir = ran.run_dir
    claim = "Claim 'divergence rate < 0.3 at 95%' (--claim-max-rate 0.3) needs 9 clean canaries per level"
    assert claim in ran.stdout and "holds at concurrency 0, 8." in ran.stdout  # the terminal's summary says it
    assert "ended early" not in ran.stdout
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["canaries_per_level"] == 9 and manifest["levels_ended_by_claim"] == []
    report = json.loads((run_dir / "report.json").read_text())
    for lv in report["canaries"][0]["levels"]:
        assert lv["canaries"] == 9, lv
        assert lv["claim"]["holds"] and lv["claim"]["status"] == "holds" and lv["claim"]["asked"]
        assert lv["claim"]["upper_bound"] < 0.3
    assert "holds at concurrency 0, 8" in (run_dir / "report.md").read_text()
    assert "<h3>Claim</h3>" in (run_dir / "report.html").read_text()
    done = loadgen("check", str(run_dir), "--claim-max-rate", "0.3")
    assert done.returncode == 0, done.stdout
    assert loadgen("check", str(run_dir), "--claim-max-rate", "0.05").returncode == 1  # 9 < 59 canaries
    bad = loadgen("check", str(run_dir), "--claim-max-rate", "1.5")
    assert bad.returncode == 2 and "--claim-max-rate" in bad.stderr


def test_default_engine_divergence_ends_the_level_and_fails_the_claim(tmp_path: Path) -> None:
    ran = _run(tmp_path, "default", 64)
    run_dir = ran.run_dir
    manifest = json.loads((run_dir / "manifest.json").read_text())
    report = json.loads((run_dir / "report.json").read_text())
    levels = {lv["concurrency"]: lv for lv in report["canaries"][0]["levels"]}
    assert levels[0]["canaries"] == 9 and levels[0]["claim"]["status"] == "holds"  # alone: never diverges
    busy = levels[8]
    assert busy["diverged"] >= 1, "the default engine was expected to diverge at level 8"
    assert busy["claim"]["status"] == "impossible" and not busy["claim"]["holds"]
    (ended,) = manifest["levels_ended_by_claim"]
    assert ended["level"] == 8 and ended["completed"] == busy["canaries"] < 9 and ended["canary"] == "story"
    assert busy["claim"]["ended_early"]
    assert manifest["status"] == "finished"
    done = loadgen("check", str(run_dir), "--claim-max-rate", "0.3")
    assert done.returncode == 1
    assert "not supported at: concurrency 8" in done.stdout
    assert "FAIL  story concurrency 8" in done.stdout and "PASS  story concurrency 0" in done.stdout
    assert "FAIL  run finished" not in done.stdout and "FAIL  story: every planned level" not in done.stdout
    assert "ended early by the claim rule" in (run_dir / "report.md").read_text()
    said = f"Level 8 ({busy['canaries']} of 9 canaries) ended early by the claim rule: a canary diverged"
    assert said in ran.stdout and "(--claim-max-rate 0.3) needs 9 clean canaries" in ran.stdout
    assert "holds at concurrency 0." in ran.stdout
