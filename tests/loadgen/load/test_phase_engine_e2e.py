"""Background aimed at one phase of the canary confirms the attribution by intervention, against the embedded
engine's known truth, through ``python -m loadgen run`` with the engine it starts and the step trace it collects.

``--invariant-paths matmul,attention,norm`` fixes every reduction path but the step kind (loadgen/engine/plan.py):
a decode row's logits move only in a step that also holds another request's prefill. With ``background.phase =
"decode"`` the background's prefills land beside the canary's decode, so canaries drift and the report says drift
followed the step kind; with ``"prefill"`` the background is prefilled before the canary goes and nothing is sent
while it decodes, so no canary drifts (docs/design.md, "Background aimed at one phase").
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from collectors.jsonl import read_jsonl

LEVEL = 3
CANARIES = 4
BASELINE = 2
SCENARIO = f"""
name = "aimed"

[endpoint]
kind = "completions"

[[canaries]]
id = "story"
prompt = "The history of the old harbour town begins with a small group of fishermen who"
max_tokens = 16
seed = 0
logprobs = true
stream = true

[background]
seed = 7
prompt_words = [20, 60]
max_tokens = [64, 96]  # long enough that none ends before a slower slot's first token opens the gate
phase = "{{phase}}"

[sweep]
levels = [{LEVEL}]
canaries_per_level = {CANARIES}
warmup = 0
baseline = {BASELINE}
settle_timeout_s = 5

[launcher]
kind = "embedded"
args = ["--invariant-paths", "matmul,attention,norm"]
ready_timeout_s = 60
"""


def _run(tmp_path: Path, phase: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The report of one run in ``phase`` mode, and its sweep canaries' records."""
    scenario = tmp_path / f"{phase}.toml"
    scenario.write_text(SCENARIO.replace("{phase}", phase))
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "loadgen", "run", str(scenario), "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")]
    report = orjson.loads((run_dir / "report.json").read_bytes())
    assert isinstance(report, dict) and report["run"]["background_phase"] == phase
    assert report["run"]["engine_trace"]["records_joined"] == BASELINE + CANARIES
    records = [r for r in read_jsonl(run_dir / "canaries.jsonl").rows if r["phase"] == "sweep"]
    assert len(records) == CANARIES and all(r["background_phase"] == phase and r["held_at_send"] for r in records)
    return report, records


def test_background_beside_the_decode_moves_the_canary_by_the_step_kind(tmp_path: Path) -> None:
    report, _ = _run(tmp_path, "decode")
    block = report["canaries"][0]["engine_steps"]
    assert block["drifted"] > 0, block
    assert block["sentence"].startswith("Drift followed the step kind"), block["sentence"]
    for moved in block["drifts"]:  # every first drift computed by the canary's decode beside another's prefill
        assert moved["drift_step"]["row"] == "decode" and moved["drift_step"]["kind"] == "mixed", moved


def test_background_prefilled_before_the_canary_leaves_it_untouched(tmp_path: Path) -> None:
    report, records = _run(tmp_path, "prefill")
    block = report["canaries"][0]["engine_steps"]
    assert block["drifted"] == 0, block
    assert all(r["background_held_at_send"] == LEVEL for r in records), records  # the background was there
    kinds = {r["value"]: r["positions"] for r in block["factors"][0]["rows"]}
    assert kinds.get("decode beside prefills", 0) == 0, kinds  # no prefill while the canary decoded
