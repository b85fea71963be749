"""The seed contracts against the embedded engine's known truth, through ``loadgen run`` and ``loadgen check``
(the gate in this process).

The embedded engine follows vLLM V1's sampler (docs/engine.md, "Sampling and the re-score"): a seeded request
draws from its own generator, choice j of n seeded seed + j. With ``--batch-invariant`` its logits do not move
with the batch, so a seeded sample is the same tokens at every level; in its default mode the numerics change
with the batch's shape, so under load some seeded samples take another token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tests.loadgen.cli.clikit import Ran, loadgen, loadgen_run
from tests.loadgen.scenariokit import STORY_PROMPT, embedded_scenario

CANARIES = f"""
[[canaries]]
id = "roll"
prompt = "{STORY_PROMPT}"
max_tokens = 24
temperature = 1.0
top_p = 0.95
seeds = [11, 12]

[[canaries]]
id = "group"
prompt = "Once upon a time in a quiet valley there lived"
max_tokens = 24
temperature = 1.0
seed = 5
n = 3
"""


def _run(tmp_path: Path, args: list[str]) -> tuple[Path, dict[str, Any]]:
    scenario = embedded_scenario("rl", CANARIES, engine_args=args, levels=[0, 6], canaries_per_level=5)
    done = loadgen_run(scenario, tmp_path / "runs", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = orjson.loads((done.run_dir / "report.json").read_bytes())
    assert isinstance(report, dict)
    return done.run_dir, report


def _check(run_dir: Path, *gates: str) -> Ran:
    return loadgen("check", str(run_dir), "--allow-unmeasured-levels", *gates)


def test_batch_invariant_engine_keeps_every_seed_contract_at_every_level(tmp_path: Path) -> None:
    run_dir, report = _run(tmp_path, ["--batch-invariant"])
    contracts = report["seed_contracts"]
    same = {b["canary"]: b for b in contracts["same_seed"]}
    assert set(same) == {"roll.seed11", "roll.seed12", "group.choice0", "group.choice1", "group.choice2"}
    assert same["group.choice2"]["seed"] == 7  # choice j seeded seed + j
    for block in same.values():
        assert [lv["concurrency"] for lv in block["levels"]] == [0, 6]
        assert all(lv["n"] == 5 and lv["k"] == 0 for lv in block["levels"]), block
    (seeds,) = contracts["seeds"]
    assert seeds["seeds"] == [11, 12] and seeds["overall"]["k"] == 0 and seeds["verdict"].startswith("seeds honoured")
    (choices,) = contracts["choices"]
    assert choices["overall"] == {**choices["overall"], "n": 30, "k": 0}
    gates = ["--max-seed-mismatch", "0@each", "--max-seed-collision", "0", "--max-duplicate-choices", "0@each"]
    done = _check(run_dir, *gates)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "FAIL" not in done.stdout


def test_default_engine_breaks_the_same_seed_contract_under_load_and_check_fails(tmp_path: Path) -> None:
    run_dir, report = _run(tmp_path, [])
    same = report["seed_contracts"]["same_seed"]
    at_load = sum(lv["k"] for b in same for lv in b["levels"] if lv["concurrency"] == 6)
    assert at_load > 0, same
    for b in same:  # each mismatch classed once: the logits moved before the fork, or only the draw changed
        assert b["logits_moved"] + b["draw_only"] + b["unclassified"] == b["overall"]["k"]
    done = _check(run_dir, "--max-seed-mismatch", "0@each")
    assert done.returncode == 1, done.stdout[-3000:]
    assert "max-seed-mismatch 0" in done.stdout and "concurrency 6" in done.stdout
