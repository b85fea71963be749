"""An engine started here writes its step trace into the folder it is told, and the files follow its log."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import pytest

from loadgen.core.scenario import LauncherSpec
from loadgen.core.steptrace import ENV, FILE_GLOB
from loadgen.launchers.launcher import Launcher
from loadgen.launchers.step_trace import move_traces, trace_env, trace_folder


def test_only_trace_files_move_and_none_is_overwritten(tmp_path: Path) -> None:
    source, target = tmp_path / "tmp", tmp_path / "run"
    source.mkdir()
    target.mkdir()
    for name in ("engine_steps-embedded-h-1.jsonl", "engine_steps-vllm-h-2.jsonl", "engine.log", "other.jsonl"):
        (source / name).write_text(name)
    (target / "engine_steps-vllm-h-2.jsonl").write_text("kept")
    assert move_traces(source, target) == [target / "engine_steps-embedded-h-1.jsonl"]
    assert sorted(p.name for p in source.iterdir()) == ["engine.log", "engine_steps-vllm-h-2.jsonl", "other.jsonl"]
    assert (target / "engine_steps-vllm-h-2.jsonl").read_text() == "kept"
    assert move_traces(target, target) == []
    assert trace_folder(trace_env(source)) == source and trace_folder({}) is None and trace_folder(None) is None


def _complete(url: str) -> None:
    body = json.dumps({"prompt": "the old man", "max_tokens": 3}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200


@pytest.mark.parametrize(
    "spec",
    [
        LauncherSpec(kind="embedded", ready_timeout_s=60),
        LauncherSpec(kind="command", command=f"exec {sys.executable} -m loadgen.engine --port {{port}}"),
    ],
    ids=["embedded", "command"],
)
def test_a_launched_engine_traces_into_its_folder_and_the_files_follow_the_log(
    spec: LauncherSpec, tmp_path: Path
) -> None:
    tmp, run = tmp_path / "tmp", tmp_path / "run"
    run.mkdir()
    with Launcher(spec, env=trace_env(tmp)) as launcher:
        engine = launcher.start(tmp / "engine.log")
        assert ENV not in (launcher.describe()["command"] or "")  # a temporary folder, not a setting to repeat
        (first,) = tmp.glob(FILE_GLOB)  # the engine opens its file at start
        engine.move_log(run / "engine.log")
        assert not list(tmp.glob(FILE_GLOB)) and (run / first.name).exists()
        _complete(engine.url)  # written after the move: the engine writes on into the moved file
        late = tmp / "engine_steps-embedded-elsewhere-1.jsonl"  # a file a later process opened
        late.write_text("{}\n")
    assert (run / late.name).exists() and not late.exists()  # moved when the engine stopped
    lines = (run / first.name).read_bytes().splitlines()
    assert len(lines) == 3  # one prefill step and two decode steps
