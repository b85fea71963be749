"""The attribution against the embedded engine's known truth, through ``loadgen run`` with the engine it starts.

``--invariant-paths matmul,attention,norm`` fixes every reduction path but the step kind (loadgen/engine/plan.py):
a decode row's logits move only in a step that also holds another request's prefill, as measured on vLLM with
``VLLM_BATCH_INVARIANT=1``. The report must find exactly that factor from the engine's step trace alone, and,
with ``--batch-invariant``, find no drift at all.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.loadgen.cli.clikit import loadgen_run
from tests.loadgen.scenariokit import embedded_scenario, story


def _run(tmp_path: Path, args: list[str]) -> dict:  # type: ignore[type-arg]
    scenario = embedded_scenario("why", story(max_tokens=24), engine_args=args, levels=[0, 4], canaries_per_level=6)
    done = loadgen_run(scenario, tmp_path / "runs", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = orjson.loads((done.run_dir / "report.json").read_bytes())
    assert isinstance(report, dict)
    return report


def test_the_report_names_the_step_kind_the_engine_was_built_with(tmp_path: Path) -> None:
    report = _run(tmp_path, ["--invariant-paths", "matmul,attention,norm"])
    (canary,) = report["canaries"]
    block = canary["engine_steps"]
    # the baseline's 2, then 6 at each of levels 0 and 4
    assert block["source"] == "embedded" and block["joined"] == block["records"] == 14
    assert block["drifted"] > 0, block
    assert block["sentence"].startswith("Drift followed the step kind: all "), block["sentence"]
    assert "steps that mixed its decode with others' prefills" in block["sentence"]
    kinds = {r["value"]: r for r in block["factors"][0]["rows"]}
    assert kinds["decode-only"]["drifts"] == 0 and kinds["decode-only"]["positions"] > 0
    for moved in block["drifts"]:  # every first drift was computed by a decode row beside another's prefill
        assert moved["drift_step"]["row"] == "decode" and moved["drift_step"]["kind"] == "mixed", moved
        assert moved["first_flip"] is None or moved["first_flip"] >= moved["first_drift"]
    assert report["run"]["witness"]["source"] in ("engine_batch_sizes", "engine_trace")
    assert report["run"]["engine_trace"]["records_joined"] == 14


@pytest.mark.parametrize("args", [["--batch-invariant"]])
def test_a_batch_invariant_engine_gives_nothing_to_attribute(tmp_path: Path, args: list[str]) -> None:
    block = _run(tmp_path, args)["canaries"][0]["engine_steps"]
    assert block["drifted"] == 0 and block["joined"] == 14
    assert block["sentence"] == (
        "None of the 14 records joined to the engine trace drifted from the reference: nothing to attribute."
    )
    assert any(r["value"] == "decode beside prefills" and r["positions"] > 0 for r in block["factors"][0]["rows"])
