"""``reports.repro.folder``: picking one canary record, the load it ran under, the reference beside it, the replay.

Run folders are written by hand (``runkit``) in the collectors' layout, so every expected number is known.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import orjson
import pytest

from collectors.read.runfolder import load_run
from loadgen.core.errors import UsageError
from loadgen.core.scenario import LauncherSpec, parse_scenario
from loadgen.launchers.approval import command_to_approve
from reports.analysis.canary import analyse
from reports.repro import choice as repro_choice
from reports.repro import folder as repro
from reports.repro import in_flight as repro_in_flight
from reports.repro import replay as repro_replay
from reports.repro.toml_writer import toml_text
from tests.reports.runkit import rec, write_run

T0 = 1_700_000_000.0
BODY = {"model": "tiny", "prompt": "p", "max_tokens": 3, "seed": 0, "temperature": 0, "stream": False}
SCENARIO = {
    "name": "t",
    "endpoint": {"kind": "completions", "model": "tiny", "api_key_env": "MY_KEY", "base_url": "http://127.0.0.1:1"},
    "canaries": [{"id": "c0", "prompt": "p", "max_tokens": 3, "seed": 0, "stream": False, "expect_cache": None}],
    "background": {"seed": 3, "prompt_words": [8, 40], "max_tokens": [16, 48], "stream": True, "kind": None},
    "sweep": {"levels": [0, 4], "canaries_per_level": 2, "warmup": 1, "baseline": 2, "burst": 0},
}


def _records() -> list[dict[str, Any]]:
    """Send order: warm-up, two baselines, two at level 0, then level 4: ok, diverged at 1, failed, diverged at 2."""
    same = [1, 2, 3]
    rows = [
        rec(same, phase="warmup", sent_at=T0 + 0),
        rec(same, phase="baseline", sent_at=T0 + 1),
        rec(same, phase="baseline", sent_at=T0 + 2),
        rec(same, level=0, sent_at=T0 + 3),
        rec(same, level=0, sent_at=T0 + 4),
        rec(same, level=4, sent_at=T0 + 5),
        rec([1, 9, 9], level=4, sent_at=T0 + 10, engine_batch_sizes=[5, 5, 6], held_at_send=True),
        rec(None, level=4, status="error", error_kind="timeout", sent_at=T0 + 12),
        rec([1, 2, 7], level=4, sent_at=T0 + 14),
    ]
    for r in rows:
        r["request"] = dict(BODY)
        r["latency_s"] = 1.0 if r["status"] == "ok" else None
    return rows


def _background() -> list[dict[str, Any]]:
    """Around the diverged canary (sent T0+10, ended T0+11)."""

    def bg(start: float, latency: float | None, prompt: int, **extra: Any) -> dict[str, Any]:
        return {
            "level": 4,
            "phase": "sweep",
            "sent_at": start,
            "latency_s": latency,
            "ttft_s": 0.1,
            "status": "ok",
            "error_kind": None,
            "http_status": 200,
            "shared_prefix": False,
            "prompt_tokens": prompt,
            "completion_tokens": 20,
            **extra,
        }

    return [
        bg(T0 + 8.0, 1.0, 11),  # ended before: out
        bg(T0 + 9.5, 1.0, 22),  # overlaps the start
        bg(T0 + 9.0, 3.0, 33, shared_prefix=True),  # the whole lifetime
        bg(T0 + 10.6, 0.2, 44),  # inside
        bg(T0 + 11.5, 1.0, 55),  # after: out
    ]


def make_run(tmp_path: Path, **over: Any) -> Path:
    rows = _records()
    # written in two files, deliberately out of send order: numbering must follow send time, not file order
    return write_run(
        tmp_path / "run",
        rows[::-1],
        levels=[0, 4],
        files=2,
        scenario=over.pop("scenario", SCENARIO),
        extra={"background.jsonl": _background()},
        **over,
    )


def raw(run_dir: Path, request_id: str | None) -> dict[str, Any] | None:
    for path in run_dir.glob("canaries*.jsonl"):
        for line in path.read_bytes().splitlines():
            row = orjson.loads(line)
            if row["request_id"] == request_id:
                return dict(row)
    return None


def engine_command(table: dict[str, Any]) -> str:
    return command_to_approve(LauncherSpec.model_validate(table))


def folder(run_dir: Path, record: int | None = None) -> tuple[repro_choice.Choice, dict[str, bytes], dict[str, Any]]:
    run = load_run(run_dir)
    choice = repro_choice.select(run, "c0", record)
    mine = raw(run_dir, choice.request_id)
    assert mine is not None
    files, scenario = repro.build_folder(
        run, choice, mine, raw(run_dir, choice.ref_request_id), _background(), engine_command
    )
    return choice, files, scenario


def test_the_default_is_the_first_divergent_record_and_agrees_with_the_report(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    run = load_run(run_dir)
    choice = repro_choice.select(run, "c0", None)
    assert (choice.number, choice.total) == (7, 9)
    assert choice.first_divergence == 1 and choice.compared
    assert choice.counts == {"records": 9, "completions": 7, "diverged": 2, "errors": 1, "warmup": 1}
    report = analyse(run.canaries, [0, 4])[0]
    assert choice.ref_request_id == report["reference"]["request_id"]
    assert choice.reference["kind"] == report["reference"]["kind"] == "baseline"
    assert sorted(f["position"] for f in report["forks"]) == [1, 2]
    assert choice.co_residency["source"] == "engine_batch_sizes"
    assert (choice.co_residency["min"], choice.co_residency["max"], choice.co_residency["held"]) == (4, 5, True)


def test_records_are_numbered_from_one_in_send_order_across_files(tmp_path: Path) -> None:
    run = load_run(make_run(tmp_path))
    phases = [str(run.canaries.frame["phase"].iloc[repro_choice.select(run, "c0", n).row]) for n in range(1, 10)]
    assert phases == ["warmup", "baseline", "baseline", "sweep", "sweep", "sweep", "sweep", "sweep", "sweep"]
    last = repro_choice.select(run, "c0", 9)
    assert last.first_divergence == 2
    failed = repro_choice.select(run, "c0", 8)
    assert failed.first_divergence is None and not failed.compared


def test_bad_choices_are_usage_errors_naming_folder_option_and_expectation(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    run = load_run(run_dir)
    with pytest.raises(UsageError) as unknown:
        repro_choice.select(run, "nope", None)
    assert str(unknown.value) == (f"{run_dir}: --canary 'nope': no such canary in this run (expected one of: c0)")
    for n in (0, 10, -1):
        with pytest.raises(UsageError) as out_of_range:
            repro_choice.select(run, "c0", n)
        assert str(out_of_range.value).startswith(f"{run_dir}: --record {n}: canary 'c0' has 9 record(s)")
        assert "(expected 1..9" in str(out_of_range.value)


def test_no_divergent_record_is_an_error_that_says_so_with_the_counts(tmp_path: Path) -> None:
    rows = [rec([1, 2], phase="baseline"), rec([1, 2], level=4), rec(None, level=4, status="error")]
    run_dir = write_run(tmp_path / "run", rows)
    with pytest.raises(UsageError) as err:
        repro_choice.select(load_run(run_dir), "c0", None)
    assert str(err.value) == (
        f"{run_dir}: --canary 'c0': none diverged from the reference (3 records: 2 completions compared, "
        "0 diverged, 1 errors, 0 warm-up); expected a divergent record, or pick one with --record N (1..3)"
    )
    assert repro_choice.select(load_run(run_dir), "c0", 2).first_divergence is None  # an explicit pick still works


def test_the_load_in_flight_counts_the_overlapping_background_requests(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    _, files, _ = folder(run_dir)
    load = orjson.loads(files["in_flight.json"])
    bg = load["background"]
    assert bg["overlapping"] == 3 and bg["whole_lifetime"] == 1
    assert [r["prompt_tokens"] for r in bg["requests"]] == [33, 22, 44]  # in send order
    assert [r["start_s"] for r in bg["requests"]] == [-1.0, -0.5, 0.6]
    assert (bg["concurrent_min"], bg["concurrent_max"]) == (1, 2)
    assert bg["prompt_tokens"] == {"min": 22, "median": 33.0, "max": 44}
    assert bg["shared_prefix"] == 1
    assert (bg["stream"], bg["max_tokens_range"]) == (True, [16, 48])  # not per request: the run's settings
    assert (load["level"], load["held_at_send"], load["engine_batch_sizes"]) == (4, True, [5, 5, 6])
    assert load["other_canaries"] == []


def test_overlap_edges() -> None:
    def row(start: float, latency: float | None) -> dict[str, Any]:
        return {"sent_at": start, "latency_s": latency}

    assert repro_in_flight.overlaps(row(0.0, 1.0), 0.5, 2.0)
    assert not repro_in_flight.overlaps(row(0.0, 0.5), 0.5, 2.0)  # ended as the canary was sent
    assert not repro_in_flight.overlaps(row(2.0, 1.0), 0.5, 2.0)  # sent as it ended
    assert repro_in_flight.overlaps(row(1.0, None), 0.5, 2.0)  # no latency: a point inside
    assert not repro_in_flight.overlaps(row(0.1, None), 0.5, 2.0)
    assert not repro_in_flight.overlaps({"sent_at": None}, 0.5, 2.0)


def test_the_side_by_side_marks_the_report_s_first_divergence(tmp_path: Path) -> None:
    _, files, _ = folder(make_run(tmp_path))
    table = files["side_by_side.md"].decode()
    lines = [line for line in table.splitlines() if line.startswith("| 1 |")]
    assert lines == ["| 1 | 2 | `t2` | -0.5 | 9 | `t9` | -0.5 | 0 | **← first divergence** |"]
    completion = orjson.loads(files["completion.json"])
    assert completion["first_divergence"] == 1 and completion["record"] == 7 and completion["records"] == 9
    assert completion["this"]["token_ids"] == [1, 9, 9] and completion["reference"]["record"]["token_ids"] == [1, 2, 3]
    readme = files["README.md"].decode()
    assert "record 7 of 9" in readme and "from token 1 on" in readme and "`t2`" in readme and "`t9`" in readme


def test_a_warm_up_record_is_compared_by_the_same_identity(tmp_path: Path) -> None:
    rows = [rec([1, 5], phase="warmup"), rec([1, 2], phase="baseline"), rec([1, 2], level=4)]
    run_dir = write_run(tmp_path / "run", rows)
    run = load_run(run_dir)
    choice = repro_choice.select(run, "c0", 1)
    assert not choice.compared and choice.first_divergence is None
    mine = raw(run_dir, choice.request_id)
    assert mine is not None
    assert repro_choice.resolved_divergence(choice, mine, raw(run_dir, choice.ref_request_id)) == 1


def test_the_files_hold_the_body_as_recorded_and_the_endpoint_from_the_manifest(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, server={"version": "9.9", "config": {"settings": {"prefix_caching": True}}})
    choice, files, _ = folder(run_dir)
    assert list(files) == list(repro.FILES)
    assert orjson.loads(files["request.json"]) == raw(run_dir, choice.request_id)["request"]  # type: ignore[index]
    endpoint = orjson.loads(files["endpoint.json"])
    assert endpoint["base_url"] == "http://127.0.0.1:1" and endpoint["route"] == "/v1/completions"
    assert endpoint["server_version"] == "9.9" and endpoint["server_settings"] == {"prefix_caching": True}
    assert endpoint["model"] == "tiny"


def test_the_replay_scenario_loads_and_holds_the_canary_at_the_record_s_level(tmp_path: Path) -> None:
    _, files, scenario = folder(make_run(tmp_path))
    text = files["replay.toml"].decode()
    loaded = parse_scenario(tomllib.loads(text), "replay.toml")
    assert tomllib.loads(text) == scenario
    assert loaded.sweep.levels == [4] and loaded.sweep.burst == []
    assert (loaded.sweep.baseline, loaded.sweep.warmup, loaded.sweep.canaries_per_level) == (2, 1, 2)
    assert [c.id for c in loaded.canaries] == ["c0"] and loaded.canaries[0].prompt == "p"
    assert loaded.background.seed == 3 and loaded.background.prompt_words == (8, 40)
    # an external endpoint (loadgen started no engine): the replay goes where it is told, with no key of the run's
    assert loaded.endpoint.base_url is None and loaded.endpoint.api_key_env is None and loaded.launcher is None
    assert loaded.labels == {"batch_invariant": "0", "repro_of": "run-test", "repro_record": "c0#7"}
    script = files["replay.sh"].decode()
    assert script.startswith("#!/bin/sh\n")
    assert "127.0.0.1:1" not in script and "MY_KEY" not in script and script.endswith("\nexit 2\n")


def test_an_embedded_engine_run_replays_with_the_same_engine_arguments(tmp_path: Path) -> None:
    command = [*repro_replay.EMBEDDED_PREFIX, "--logit-scale=1.0"]
    run_dir = make_run(tmp_path, engine={"kind": "embedded", "command": command})
    _, files, scenario = folder(run_dir)
    assert "base_url" not in scenario["endpoint"]
    assert scenario["launcher"] == {"kind": "embedded", "args": ["--logit-scale=1.0"], "require_approval": True}
    shown = command_to_approve(LauncherSpec.model_validate(scenario["launcher"]))
    assert shown.endswith(" -P -m loadgen.engine --host 127.0.0.1 --port 0 --logit-scale=1.0")
    assert f"\n#   {shown}\n" in files["replay.sh"].decode() and f"\n    {shown}\n" in files["README.md"].decode()


def _curl_block(readme: str) -> list[str]:
    """The shell lines of the README's "What was sent"."""
    return readme.split("## What was sent", 1)[1].split("```sh\n", 1)[1].split("\n```", 1)[0].splitlines()


CURL = "curl -s \"$BASE_URL\"/v1/completions -H 'Content-Type: application/json' -d @request.json"


def test_the_curl_of_a_run_on_an_endpoint_of_its_own_says_it_may_be_gone(tmp_path: Path) -> None:
    """Loadgen started no engine: the run's URL is named as where it went, maybe gone; the curl goes to
    ``$BASE_URL``, which the reader sets to a live endpoint (the run's only if it still answers)."""
    readme = folder(make_run(tmp_path))[1]["README.md"].decode()
    assert "on `http://127.0.0.1:1`" in readme and "it may be gone" in readme
    assert _curl_block(readme) == [
        "BASE_URL=http://HOST:PORT  # a live endpoint: the run's, above, only if it still answers",
        CURL,
    ]


def test_the_curl_of_a_run_on_a_launched_engine_says_to_start_it_first(tmp_path: Path) -> None:
    launcher = {"kind": "vllm", "model": "m", "args": ["--seed", "0"]}
    run_dir = make_run(
        tmp_path,
        scenario={**SCENARIO, "launcher": launcher},
        engine={"kind": "vllm", "command": ["vllm", "serve", "m", "--port", "41234"]},
    )
    readme = folder(run_dir)[1]["README.md"].decode()
    assert "(vllm) and stopped after it: that address is gone. Start that engine first" in readme
    assert _curl_block(readme) == ["BASE_URL=http://HOST:PORT  # where the engine you started listens", CURL]


def test_the_curl_of_a_run_on_the_embedded_engine_starts_it_first_with_the_run_s_arguments(tmp_path: Path) -> None:
    """Each argument quoted on its own: one from a hostile manifest stays one word of one line."""
    command = [*repro_replay.EMBEDDED_PREFIX, "--logit-scale=1.0", "--seed=$(touch PWNED) x"]
    readme = folder(make_run(tmp_path, engine={"kind": "embedded", "command": command}))[1]["README.md"].decode()
    assert "that address is gone. Start the same engine first" in readme
    assert _curl_block(readme) == [
        "loadgen serve --port 8000 --logit-scale=1.0 '--seed=$(touch PWNED) x'"
        "  # in another terminal: the run's engine",
        "BASE_URL=http://127.0.0.1:8000",
        CURL,
    ]


def test_a_burst_copy_replays_as_a_burst(tmp_path: Path) -> None:
    rows = [rec([1, 2], phase="baseline"), rec([1, 3], level=5, burst=True)]
    run_dir = write_run(tmp_path / "run", rows, scenario=SCENARIO)
    _, _, scenario = folder(run_dir, 2)
    loaded = parse_scenario(scenario, "replay")
    assert loaded.sweep.levels == [0] and loaded.sweep.burst == [5]


def test_a_manifest_without_the_canary_rebuilds_it_from_the_body(tmp_path: Path) -> None:
    rows = [rec([1, 2], phase="baseline"), rec([1, 3], level=2)]
    for r in rows:
        r["request"] = {"messages": [{"role": "user", "content": 'say "hi"\n'}], "max_tokens": 2, "seed": None}
        r["endpoint"] = "chat"
    run_dir = write_run(tmp_path / "run", rows)  # runkit's manifest holds no scenario canaries
    _, files, _ = folder(run_dir)
    loaded = parse_scenario(tomllib.loads(files["replay.toml"].decode()), "replay")
    canary = loaded.canaries[0]
    assert canary.kind == "chat" and canary.messages is not None and canary.messages[0].content == 'say "hi"\n'
    readme = files["README.md"].decode()
    assert "rebuilt from the request body" in readme and "replay sends seed 0" in readme


@pytest.mark.parametrize("value", ['a "quoted" \\ back', "line\nbreak\ttab", "ünï — 字", "del\x7f nul\x00 esc\x1b"])
def test_toml_text_round_trips_awkward_strings(value: str) -> None:
    data = {"s": value, "n": 1, "f": 0.5, "b": True, "l": [1, 2], "t": {"k-y": value, "a b": [value]}}
    data["arr"] = [{"x": value, "inner": [{"r": "u", "c": value}]}]
    assert tomllib.loads(toml_text(data)) == data
