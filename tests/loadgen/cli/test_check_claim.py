"""``loadgen check --claim-max-rate`` through the CLI's entry point, on a hand-made run folder with levels 0, 1, 4, 16:
the closing line lists the failed levels in numeric order, each FAIL line names its scope once, and a level
short of canaries is "too few" in the gate as it is in report.md's claim table."""

from __future__ import annotations

from pathlib import Path

from tests.loadgen.cli.clikit import loadgen
from tests.reports.runkit import rec, write_run


def test_claim_gate_speaks_like_the_report(tmp_path: Path) -> None:
    records = [rec([1, 2, 3], phase="baseline") for _ in range(2)]
    for level in (0, 1, 4, 16):
        records += [rec([1, 5, 3] if level == 16 and i == 0 else [1, 2, 3], level=level) for i in range(4)]
    run_dir = write_run(tmp_path / "run", records, levels=[0, 1, 4, 16])
    assert loadgen("report", str(run_dir)).returncode == 0
    done = loadgen("check", str(run_dir), "--claim-max-rate", "0.3")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "not supported at: concurrency 0, 1, 4, 16\n" in done.stdout
    fails = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 4
    for line in fails:
        assert line.count("concurrency") == 1, line
    assert "FAIL  c0 concurrency 4: claim rate < 0.3 at 95%: too few: 0 of 4 diverged" in done.stdout
    assert "FAIL  c0 concurrency 16: claim rate < 0.3 at 95%: impossible: 1 of 4 diverged" in done.stdout
    assert "not shown" not in done.stdout
    table = (run_dir / "report.md").read_text()
    assert "| 4 | too few | 4 | 0 |" in table and "| 16 | impossible | 4 | 1 |" in table
