"""Through the real CLI: ``loadgen compare`` of runs that share no canary says so, in comparison.md and .html,
and does not find every reference equal (``reports.compare.references.said``).

Both run folders are written by hand (``runkit``): the same one-level sweep, one canary each, named apart.
"""

from __future__ import annotations

from pathlib import Path

from tests.loadgen.cli import clikit
from tests.reports.runkit import rec, write_run


def _run(folder: Path, canary: str, ids: list[int]) -> Path:
    records = [rec(ids, phase="baseline", canary=canary), *(rec(ids, level=0, canary=canary) for _ in range(3))]
    return write_run(folder, records, levels=[0])


def test_runs_with_no_canary_in_common_are_said_to_have_none(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", "story", [1, 2, 3])
    b = _run(tmp_path / "b", "poem", [1, 2, 3])
    done = clikit.loadgen_process("compare", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert done.returncode == 0, done.stdout + done.stderr
    for page in ("comparison.md", "comparison.html"):
        text = (tmp_path / "cmp" / page).read_text()
        assert "b and a have no canary in common: their references cannot be compared" in text, page
        assert "reference completions equal" not in text, page


def test_runs_sharing_a_canary_still_compare_their_references(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", "story", [1, 2, 3])
    b = _run(tmp_path / "b", "story", [1, 2, 3])
    done = clikit.loadgen_process("compare", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert done.returncode == 0, done.stdout + done.stderr
    text = (tmp_path / "cmp" / "comparison.md").read_text()
    assert "every run's reference completions equal those of the run it is compared with" in text
    assert "no canary in common" not in text
