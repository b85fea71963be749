"""Cold-boot studies against real engine processes: the embedded engine, and one behind a shell command."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest

from collectors.jsonl import read_jsonl
from loadgen.cli.main import main
from loadgen.core.errors import EngineError, ScenarioError, UsageError
from loadgen.core.manifest import read_manifest
from loadgen.core.record import CanaryRecord
from loadgen.core.scenario import LauncherSpec
from loadgen.studies.coldboot import cold_boot
from scenarios import path_of

ONE_CANARY = """
name = "cb"
[[canaries]]
id = "short"
prompt = "The old man climbed the green hill near the old town before the long night, so"
max_tokens = 8
"""


def test_shipped_cold_boot_finds_the_first_request_differs_on_every_boot(tmp_path: Path) -> None:
    result = cold_boot(path_of("cold-boot"), out_dir=tmp_path, boots=2, requests=3, labels={"who": "test"})
    assert result.status == "finished"
    run_dir = result.run_dir
    rows = read_jsonl(run_dir / "canaries.jsonl")
    records = [CanaryRecord.from_dict(r) for r in rows.rows]
    assert rows.skipped == 0 and len(records) == 6
    assert Counter((r.boot, r.boot_index) for r in records) == {(b, i): 1 for b in (1, 2) for i in (1, 2, 3)}
    assert all(r.status == "ok" and r.phase == "sweep" and r.level == 0 and r.token_ids for r in records)
    assert all(r.request["temperature"] == 0 and r.request["max_tokens"] == 32 for r in records)
    (c,) = result.summary["canaries"]
    assert c["first_differs_rest_agree"] == 2 and c["distinct_first"] == 1 and c["distinct_warm"] == 1
    assert [b["cached_prompt_tokens"][0] for b in c["boots"]] == [0, 0]  # a fresh engine: request 1 misses

    manifest = read_manifest(run_dir)
    assert manifest.engine is not None
    assert manifest.status == "finished" and manifest.engine["starts"] == 2 and len(manifest.boots) == 2
    assert manifest.boots[0]["url"] != manifest.boots[1]["url"]  # two processes, two free ports
    assert manifest.labels == {"engine": "embedded", "who": "test"} and manifest.levels == [0]
    assert manifest.cold_boot == {"boots": 2, "requests": 3}
    assert (run_dir / "engine.log").read_text().count("READY http://") == 2
    assert orjson.loads((run_dir / "coldboot.json").read_bytes()) == result.summary
    assert "| `short` | 2 / 2 | 1 | 1 | 0 |" in (run_dir / "coldboot.md").read_text()
    report = orjson.loads((run_dir / "report.json").read_bytes())
    assert report["canaries"][0]["overall"]["unique_completions"] == 2  # the cold and the warm answer


def test_invariant_engine_behind_a_shell_command_shows_no_cold_start_effect(tmp_path: Path) -> None:
    scenario = tmp_path / "cb.toml"
    scenario.write_text(ONE_CANARY)
    launcher = LauncherSpec(
        kind="command",
        command=f"exec {sys.executable} -m loadgen.engine --port {{port}}",
        args=["--batch-invariant"],
        ready_timeout_s=30,
    )
    result = cold_boot(scenario, out_dir=tmp_path / "runs", boots=2, requests=2, launcher=launcher, report=False)
    (c,) = result.summary["canaries"]
    assert c["first_differs_rest_agree"] == 0 and c["boots_counted"] == 2 and c["distinct_all"] == 1
    manifest = read_manifest(result.run_dir)
    assert manifest.engine is not None and manifest.engine["kind"] == "command"
    assert isinstance(command := manifest.engine["command"], str) and "--batch-invariant" in command
    assert not (result.run_dir / "report.json").exists()


def test_an_engine_that_fails_to_boot_again_fails_the_study_and_keeps_what_it_had(tmp_path: Path) -> None:
    # the first boot works; the command then refuses to start (a marker file appears after boot 1)
    marker = tmp_path / "booted-once"
    scenario = tmp_path / "cb.toml"
    scenario.write_text(ONE_CANARY)
    command = (
        f"if [ -e {marker} ]; then echo weights missing; exit 7; fi; touch {marker}; "
        f"exec {sys.executable} -m loadgen.engine --port {{port}}"
    )
    launcher = LauncherSpec(kind="command", command=command, ready_timeout_s=30)
    with pytest.raises(EngineError, match="exited with code 7") as info:
        cold_boot(scenario, out_dir=tmp_path / "runs", boots=3, requests=2, launcher=launcher)
    assert "weights missing" in str(info.value)
    (run_dir,) = (tmp_path / "runs").iterdir()
    manifest = read_manifest(run_dir)
    assert manifest.status == "failed" and manifest.canaries_reported == 2 and len(manifest.boots) == 1
    assert (
        len(read_jsonl(run_dir / "canaries.jsonl").rows) == 2
        and "weights missing" in (run_dir / "engine.log").read_text()
    )


def test_bad_requests_and_external_endpoints_are_refused_before_any_engine_starts(tmp_path: Path) -> None:
    scenario = tmp_path / "cb.toml"
    scenario.write_text(ONE_CANARY.replace('name = "cb"', 'name = "cb"\n[endpoint]\nbase_url = "http://127.0.0.1:9"'))
    with pytest.raises(ScenarioError, match=r"cb.toml: field endpoint.base_url: a cold-boot study restarts"):
        cold_boot(scenario, out_dir=tmp_path)
    with pytest.raises(UsageError, match="--requests must be at least 2"):
        cold_boot(scenario, out_dir=tmp_path, requests=1)
    assert not any(tmp_path.glob("*/manifest.json"))


def test_cli_prints_the_run_folder_and_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "cb.toml"
    scenario.write_text(ONE_CANARY)
    assert (
        main(
            ["coldboot", str(scenario), "--boots", "1", "--requests", "2", "--out", str(tmp_path / "r"), "--no-report"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.splitlines()[-1].startswith(str(tmp_path / "r")) and "boots where the first request differs" in out
    assert main(["coldboot", str(scenario), "--requests", "1"]) == 2
    assert "--requests must be at least 2" in capsys.readouterr().err
