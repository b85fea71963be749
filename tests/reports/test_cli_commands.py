"""The report, compare, check and export commands: through their ``run`` functions, and through the CLI's entry
point ``loadgen.cli.main.main`` (exit codes 0 pass, 1 threshold breached, 2 unusable input)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from loadgen.cli import check, compare, export, report
from loadgen.core.errors import RunFolderError, UsageError
from tests.loadgen.cli.clikit import loadgen
from tests.reports.runkit import rec, write_run

ROOT = Path(__file__).resolve().parents[2]


def parse(module: object, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.add_parser(parser.add_subparsers())  # type: ignore[attr-defined]
    return parser.parse_args(argv)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    records = [rec([1, 2, 3], phase="baseline"), rec([1, 2, 3], level=1), rec([1, 9, 3], level=2)]
    return write_run(tmp_path / "run", records)


def test_report_compare_export_in_process(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(report, ["report", str(run_dir)])
    assert args.func(args) == 0
    assert "earliest divergence at token 1" in capsys.readouterr().out
    assert {p.name for p in run_dir.iterdir()} >= {"report.json", "report.md", "report.html"}
    args = parse(compare, ["compare", str(run_dir), str(run_dir / "report.json"), "--out", str(tmp_path / "cmp")])
    assert args.func(args) == 0 and (tmp_path / "cmp" / "comparison.html").exists()
    args = parse(export, ["export", str(run_dir), "--out", str(tmp_path / "exp")])
    assert args.func(args) == 0 and (tmp_path / "exp" / "canaries.parquet").exists()


def test_check_in_process(run_dir: Path, tmp_path: Path) -> None:
    args = parse(check, ["check", str(run_dir), "--max-unique", "2", "--max-errors", "0@each"])
    assert args.func(args) == 0
    junit = tmp_path / "junit.xml"
    args = parse(check, ["check", str(run_dir), "--max-divergence-rate", "0@each", "--junit", str(junit)])
    assert args.func(args) == 1
    suite = ET.parse(junit).getroot().find("testsuite")
    # two threshold cases, and the five integrity checks every gate makes (reports.analysis.check.integrity)
    assert suite is not None and (suite.get("tests"), suite.get("failures")) == ("7", "1")
    with pytest.raises(UsageError, match="at least one threshold"):
        args = parse(check, ["check", str(run_dir)])
        args.func(args)
    with pytest.raises(RunFolderError):
        args = parse(check, ["check", str(tmp_path / "missing"), "--max-unique", "1"])
        args.func(args)


def test_exit_codes_through_the_cli(run_dir: Path, tmp_path: Path) -> None:
    done = loadgen("report", str(run_dir))
    assert done.returncode == 0, done.stderr
    assert (run_dir / "report.html").exists()
    assert loadgen("check", str(run_dir), "--max-unique", "2").returncode == 0
    breached = loadgen("check", str(run_dir), "--max-divergence-rate", "0.1", "--junit", str(tmp_path / "j.xml"))
    assert breached.returncode == 1 and "FAIL" in breached.stdout
    assert ET.parse(tmp_path / "j.xml").getroot().find("testsuite") is not None
    (run_dir / "canaries.jsonl").write_text('{"schema": 7, "run_id": "x"}\n')
    unusable = loadgen("check", str(run_dir), "--max-unique", "2")
    assert unusable.returncode == 2 and "schema 7" in unusable.stderr


def test_reports_never_import_locust_or_gevent() -> None:
    code = (
        "import sys, reports, reports.compare.runs, reports.render.export; "
        "print(sorted({'locust', 'gevent'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
