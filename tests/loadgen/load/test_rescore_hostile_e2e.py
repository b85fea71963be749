"""The re-score check against an endpoint that answers it badly, through ``loadgen run --host`` and ``check``.

The server (``tests/loadgen/rescore_server.py``) answers canaries well and re-scores either honestly (bitwise the
decode's logprobs) or with one hostile answer: no ``prompt_logprobs``, fewer positions than the ids sent, or
logprobs for other ids. A hostile answer must read as unmeasured with a notice naming it, never as 0 mismatches,
and the gate must fail on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.loadgen.cli.clikit import loadgen_process, loadgen_run
from tests.loadgen.serve_app import script_server

SERVER = Path(__file__).parents[1] / "rescore_server.py"
SCENARIO = """
name = "rescore-hostile"
[endpoint]
kind = "completions"
[[canaries]]
id = "c"
prompt = "one two three four"
max_tokens = 3
rescore = true
[background]
stream = false
max_tokens = [3, 3]
spawn_jitter_s = 0
[sweep]
levels = [1]
canaries_per_level = 2
warmup = 0
baseline = 1
settle_timeout_s = 2
"""


def _run(tmp_path: Path, mode: str) -> tuple[Path, dict[str, Any], str]:
    with script_server(SERVER, "--answer", mode) as url:
        done = loadgen_run(SCENARIO, tmp_path / "runs", "--host", url, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = orjson.loads((done.run_dir / "report.json").read_bytes())
    check = loadgen_process(
        "check", str(done.run_dir), "--max-rescore-mismatch", "0", "--allow-unmeasured-levels", timeout=120
    )
    return done.run_dir, report, f"{check.returncode}\n{check.stdout}"


def test_an_honest_rescore_passes(tmp_path: Path) -> None:
    _, report, check = _run(tmp_path, "honest")
    ((level),) = [lv for lv in report["rescore"]["canaries"][0]["levels"] if lv["phase"] == "sweep"]
    for side in ("alone", "at_level"):
        assert level[side]["rescored"] == level[side]["bitwise_equal"] == 2, level[side]
    assert check.startswith("0\n"), check


@pytest.mark.parametrize(
    ("mode", "kind", "said"),
    [
        ("none", "no_prompt_logprobs", "returned no prompt logprobs"),
        ("short", "fewer_positions", "fewer positions than the ids sent"),
        ("other-ids", "other_ids", "logprobs for other ids"),
    ],
)
def test_a_hostile_rescore_is_unmeasured_never_zero(tmp_path: Path, mode: str, kind: str, said: str) -> None:
    run_dir, report, check = _run(tmp_path, mode)
    for level in report["rescore"]["canaries"][0]["levels"]:
        for side in ("alone", "at_level"):
            figures = level[side]
            assert figures["rescored"] == 0 and figures["mismatch"]["rate"] is None, figures
            assert figures["unmeasured"] == {kind: figures["completions"]} and figures["note"].startswith("unmeasured")
    assert any(said in n for n in report["run"]["notices"]), report["run"]["notices"]
    assert "| unmeasured |" in (run_dir / "report.md").read_text()
    assert check.startswith("1\n") and "unmeasured: nothing re-scored" in check, check
