"""The re-score check against the embedded engine's known truths, through ``loadgen run`` with the engine it starts
and ``loadgen check --max-rescore-mismatch``.

The engine serves vLLM's ``prompt_logprobs`` (docs/engine.md, "Sampling and the re-score"): with
``--batch-invariant`` a re-score is bitwise the decode's logprobs whatever else runs; with
``--invariant-paths matmul,attention,norm`` a decode row moves only in a step that also holds another's prefill,
so a canary decoded beside the background's prefills (long prompts, short answers) differs from its re-score.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tests.loadgen.cli.clikit import loadgen_process, loadgen_run
from tests.loadgen.scenariokit import embedded_scenario, story


def _run(tmp_path: Path, args: list[str]) -> tuple[Path, dict[str, Any]]:
    canary = story(max_tokens=24) + "rescore = true\ntop_logprobs = 3\n"
    scenario = embedded_scenario("rescore", canary, engine_args=args, levels=[4], canaries_per_level=4)
    done = loadgen_run(scenario, tmp_path / "runs", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = orjson.loads((done.run_dir / "report.json").read_bytes())
    assert isinstance(report, dict)
    return done.run_dir, report


def _levels(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (canary,) = report["rescore"]["canaries"]
    return {lv["phase"] + str(lv["concurrency"]): lv for lv in canary["levels"]}


def _check(run_dir: Path, spec: str) -> int:
    """``check``'s exit on the re-score gate alone: a loaded test machine may hold the level off its band, a rule
    ``tests/reports/test_level_load.py`` owns."""
    args = ("--max-rescore-mismatch", spec, "--allow-unmeasured-levels")
    return loadgen_process("check", str(run_dir), *args, timeout=120).returncode


def test_batch_invariant_rescores_are_the_decodes_bitwise(tmp_path: Path) -> None:
    run_dir, report = _run(tmp_path, ["--batch-invariant"])
    levels = _levels(report)
    assert set(levels) == {"baseline0", "sweep4"}
    for lv in levels.values():
        for side in ("alone", "at_level"):
            figures = lv[side]
            assert figures["rescored"] == figures["completions"] > 0, figures
            assert figures["bitwise_equal"] == figures["rescored"] and figures["mismatch"]["k"] == 0
            assert figures["max_abs_delta"] == 0.0 and figures["first_mismatch"] is None
            assert figures["topk_tv"] is not None and figures["topk_tv"]["max"] == 0.0
    assert "Re-score check" in (run_dir / "report.md").read_text()
    assert "Re-score check" in (run_dir / "report.html").read_text()
    assert _check(run_dir, "0@each") == 0


def test_mixed_steps_move_the_decode_away_from_its_rescore(tmp_path: Path) -> None:
    run_dir, report = _run(tmp_path, ["--invariant-paths", "matmul,attention,norm"])
    levels = _levels(report)
    for side in ("alone", "at_level"):  # the baseline decoded in decode-only steps: the re-score's order
        assert levels["baseline0"][side]["bitwise_equal"] == levels["baseline0"][side]["rescored"] == 2
    loaded = levels["sweep4"]
    at_level = loaded["at_level"]
    assert at_level["rescored"] == at_level["completions"] == 4
    assert at_level["mismatch"]["k"] > 0 and at_level["max_abs_delta"] > 0, at_level
    assert at_level["first_mismatch"]["min"] >= 0
    # alone, the same ids re-scored the same way: a completion decoded beside prefills still differs from it
    assert loaded["alone"]["mismatch"]["k"] > 0
    assert _check(run_dir, "0") == 1
