"""``loadgen check`` fails a run whose evidence is not whole, whatever the thresholds say, and refuses
thresholds outside their range. Hand-made run folders, the CLI in this process (exit 0 pass, 1 fail, 2 bad input)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from reports.analysis.check import integrity
from tests.loadgen.cli.clikit import loadgen
from tests.reports.runkit import partial_report, rec, write_run


def good(n: int = 10, errors: int = 0) -> list[dict[str, object]]:
    records = [rec([1, 2, 3], phase="baseline")]
    records += [rec([1, 2, 3], level=lv) for lv in (0, 4) for _ in range(n // 2)]
    records += [rec(None, level=4, status="error", error_kind="timeout") for _ in range(errors)]
    return records


def test_a_whole_run_passes(tmp_path: Path) -> None:
    done = loadgen("check", str(write_run(tmp_path / "run", good())), "--max-unique", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS  run finished" in done.stdout and "PASS  no records lost: none" in done.stdout


@pytest.mark.parametrize("status", ["interrupted", "running", "failed"])
def test_a_run_that_did_not_finish_fails(tmp_path: Path, status: str) -> None:
    done = loadgen("check", str(write_run(tmp_path / "run", good(), status=status)), "--max-unique", "1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"FAIL  run finished: status '{status}': the run did not finish" in done.stdout


def test_a_planned_level_without_completions_fails(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run", good(), levels=[0, 4, 16])  # level 16 planned, never reached
    done = loadgen("check", str(run_dir), "--max-unique", "1")
    assert done.returncode == 1
    assert "FAIL  c0: every planned level has completions: no completions at concurrency 16" in done.stdout


def test_errors_above_the_default_tolerance_fail_unless_relaxed(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run", good(n=18, errors=2))  # 2 of 21 canaries: 9.5%
    done = loadgen("check", str(run_dir), "--max-unique", "1")
    assert done.returncode == 1
    assert "FAIL  error rate: 2 of 21 canaries failed (timeout ×2; the first: timeout" in done.stdout
    relaxed = loadgen("check", str(run_dir), "--max-unique", "1", "--max-error-rate", "0.1")
    assert relaxed.returncode == 0, relaxed.stdout


def test_a_torn_or_corrupt_line_fails(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run", good(), torn_tail=True)
    done = loadgen("check", str(run_dir), "--max-unique", "1")
    assert done.returncode == 1
    assert "FAIL  no records lost: canaries.jsonl end(s) in a torn line; 1 unreadable line(s) skipped" in done.stdout


def test_write_failures_counted_by_a_process_fail(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run", good(), status="finished_with_losses")
    (run_dir / "process-w1.json").write_bytes(
        orjson.dumps({"canary_write_failures": 3, "background_write_failures": 0})
    )
    done = loadgen("check", str(run_dir), "--max-unique", "1")
    assert done.returncode == 1 and "FAIL  no records lost: 3 record(s) could not be written" in done.stdout
    md = loadgen("report", str(run_dir))
    assert md.returncode == 0
    assert "**Records lost: 3 canary records could not be written.**" in (run_dir / "report.md").read_text()


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--max-divergence-rate", "5", "--max-divergence-rate '5': expected between 0 and 1"),
        ("--max-divergence-rate", "-0.1@each", "--max-divergence-rate '-0.1@each': expected between 0 and 1"),
        ("--max-unique", "-1", "--max-unique '-1': expected a finite number of at least 0"),
        ("--max-errors", "nan", "--max-errors 'nan': expected a finite number of at least 0"),
        ("--min-earliest-divergence", "inf", "--min-earliest-divergence 'inf': expected a finite number"),
        ("--max-unique", "1@-4", "--max-unique '1@-4': the level after @ must be 0 or more"),
        ("--max-error-rate", "1.5", "--max-error-rate '1.5': expected between 0 and 1"),
    ],
)
def test_thresholds_outside_their_range_are_refused(tmp_path: Path, option: str, value: str, says: str) -> None:
    run_dir = write_run(tmp_path / "run", good())
    extra = [] if option == "--max-unique" else ["--max-unique", "1"]
    done = loadgen("check", str(run_dir), *extra, f"{option}={value}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr and done.stdout == ""


def test_an_older_report_json_without_health_is_still_judged() -> None:
    report = {
        "run": {"status": "finished", "levels": [0, 4]},
        "input": {"skipped_lines": 0},
        "canaries": [
            {
                "id": "c0",
                "overall": {"errors": 1, "canaries": 4, "error_kinds": {"connection": 1}},
                "levels": [{"concurrency": 0, "completions": 2}, {"concurrency": 4, "completions": 0}],
            }
        ],
    }
    got = {o.name: (o.passed, o.message) for o in integrity(partial_report(**report))}
    assert got["run finished"][0] and got["no records lost"][0]
    assert got["c0: every planned level has completions"] == (False, "no completions at concurrency 4")
    assert got["error rate"] == (
        False,
        "1 of 4 canaries failed (connection ×1): error rate 25.0%, allowed 5% (--max-error-rate)",
    )
