"""The seed contracts against the embedded engine's known truth, through ``loadgen run`` and ``loadgen check``.

The embedded engine follows vLLM V1's sampler (docs/engine.md, "Sampling and the re-score"): a seeded request
draws from its own generator, choice j of n seeded seed + j. With ``--batch-invariant`` its logits do not move
with the batch, so a seeded sample is the same tokens at every level; in its default mode the numerics change
with the batch's shape, so under load some seeded samples take another token.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

SCENARIO = """
name = "rl"

[endpoint]
kind = "completions"

[[canaries]]
id = "roll"
prompt = "The history of the old harbour town begins with a small group of fishermen who"
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

[background]
seed = 7
prompt_words = [20, 60]
max_tokens = [2, 6]

[sweep]
levels = [0, 6]
canaries_per_level = 5
warmup = 0
baseline = 2
settle_timeout_s = 2

[launcher]
kind = "embedded"
args = {args}
ready_timeout_s = 60
"""


def _run(tmp_path: Path, args: list[str]) -> tuple[Path, dict[str, Any]]:
    scenario = tmp_path / "rl.toml"
    scenario.write_text(SCENARIO.replace("{args}", orjson.dumps(args).decode()))
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "loadgen", "run", str(scenario), "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")]
    report = orjson.loads((run_dir / "report.json").read_bytes())
    assert isinstance(report, dict)
    return run_dir, report


def _check(run_dir: Path, *gates: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "loadgen", "check", str(run_dir), "--allow-unmeasured-levels", *gates]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


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
