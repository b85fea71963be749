"""End to end through the real CLI: a background the endpoint refuses gives no verdict, and the gate fails it
(``loadgen check`` on the run folder, in this process).

A new user's first mistake: background prompts longer than the engine's context (the embedded engine, started by
``loadgen run`` itself, refuses them with HTTP 400 and vLLM's words). Every canary at the level then runs alone.
The run must say so first (terminal, report.md, report.html: the background's failures with the server's reason),
give the level no verdict (never INVARIANT), and ``loadgen check`` must fail it as evidence incomplete.
docs/design.md, "The level's band".
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.loadgen.cli.clikit import loadgen, loadgen_run

SCENARIO = """
name = "refused"
[[canaries]]
id = "c"
prompt = "The river"
max_tokens = 8
[background]
seed = 5
# the embedded engine's context is 512 tokens and its words are 3 to 4 tokens each: every background request is
# refused, while the probe's lower bound (a token a word: 400 + 16) lets the run start (loadgen.runs.context)
prompt_words = [300, 400]
max_tokens = [8, 16]
[sweep]
levels = [0, 4]
canaries_per_level = 3
warmup = 0
baseline = 2
settle_timeout_s = 0.5
"""
REASON = "maximum context length is 512 tokens"


def test_refused_background_is_said_first_gives_no_verdict_and_fails_the_gate(tmp_path: Path) -> None:
    out = loadgen_run(SCENARIO, tmp_path / "runs", timeout=300)
    run_dir = out.run_dir
    said = out.stdout + out.stderr
    # the terminal: the background's failure with the server's own reason, and the level without a verdict
    assert "Background failed:" in said and REASON in said, said
    assert "Level 4 not measured:" in said, said
    report = json.loads((run_dir / "report.json").read_text())
    [level_4] = [lv for lv in report["levels"] if lv["concurrency"] == 4]
    # the load side ended the level once its background kept failing, before any canary went out alone
    assert level_4["canaries"] == 0 and level_4["not_measured"].startswith("the load side ended it"), level_4
    assert report["health"]["background"]["errors"] == report["health"]["background"]["requests"] > 0
    assert REASON in report["health"]["background"]["first_error"]
    assert report["health"]["headline"][0].startswith("Background failed:")
    # each report says it before any figure
    md = (run_dir / "report.md").read_text()
    assert md.index("Background failed:") < md.index("| concurrency |") and REASON in md
    html = (run_dir / "report.html").read_text()
    assert html.index("Background failed:") < html.index("<table") and 'data-outcome="not measured"' in html
    assert 'data-outcome="invariant"' not in html
    # the gate: evidence incomplete, whatever thresholds hold
    gate = loadgen("check", str(run_dir), "--max-unique", "1", "--max-divergence-rate", "0@each")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "FAIL  c: every planned level measured at its level: evidence incomplete: concurrency 4:" in gate.stdout
