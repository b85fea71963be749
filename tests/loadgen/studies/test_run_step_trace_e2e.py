"""``loadgen run`` with an engine it starts: the engine is told to write its step trace, and the trace ends up in
the run folder (loadgen/launchers/step_trace.py), joined to the canary records by their request ids."""

from __future__ import annotations

from pathlib import Path

import orjson

from loadgen.core.manifest import read_manifest
from loadgen.core.steptrace import FILE_GLOB, StepRecord, record_key
from tests.loadgen.cli.clikit import loadgen_run
from tests.loadgen.scenariokit import embedded_scenario, story

SCENARIO = embedded_scenario(
    "step-trace",
    story(max_tokens=8),
    engine_args=["--invariant-paths", "matmul,attention,norm"],
    levels=[0, 3],
    canaries_per_level=2,
    baseline=1,
    prompt_words=(8, 40),
    max_tokens=(4, 16),
)


def test_an_embedded_launcher_writes_its_step_trace_into_the_run_folder(tmp_path: Path) -> None:
    done = loadgen_run(SCENARIO, tmp_path / "runs", "--no-report", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = done.run_dir  # the one thing in the output folder: the engine's temporary folder is gone
    assert read_manifest(run_dir).step_trace_requested
    (trace,) = run_dir.glob(FILE_GLOB)
    assert trace.name.startswith("engine_steps-embedded-") and (run_dir / "engine.log").exists()
    steps = [StepRecord(**orjson.loads(line)) for line in trace.read_bytes().splitlines()]
    assert [s.step for s in steps] == list(range(len(steps)))
    rows: dict[str, list[tuple[int, int, int]]] = {}
    for s in steps:
        assert s.source == "embedded" and len(s.ids) == len(s.scheduled) == len(s.computed) == len(s.prompt)
        for rid, sched, comp, prompt in zip(s.ids, s.scheduled, s.computed, s.prompt, strict=True):
            if key := record_key(rid):
                rows.setdefault(key, []).append((sched, comp, prompt))
    records = [orjson.loads(line) for f in run_dir.glob("canaries*.jsonl") for line in f.read_bytes().splitlines()]
    assert records and all(r["status"] == "ok" for r in records)
    for record in records:  # each canary's rows: one prefill, then a decode row per token after the first
        got = rows[record["request_id"]]
        prompt = got[0][2]
        assert [c + s - prompt for s, c, _ in got] == list(range(len(record["token_ids"])))
        assert got[0][0] + got[0][1] == prompt and all(s == 1 for s, _, _ in got[1:])
    assert len(rows) > len(records)  # the background's requests are in the steps too, under their own ids
