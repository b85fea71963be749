"""Through the real CLI: what ``loadgen compare`` says of the runs' references, in comparison.md and .html
(``reports.compare.references.said``): runs that share no canary are said to share none (not to have equal
references), and references that differ are said to differ, with no run blamed.

The run folders are written by hand (``runkit``): the same one-level sweep, one canary each.
"""

from __future__ import annotations

from pathlib import Path

from tests.loadgen.cli import clikit
from tests.reports.runkit import rec, write_run


def _run(folder: Path, canary: str, ids: list[int]) -> Path:
    records = [rec(ids, phase="baseline", canary=canary), *(rec(ids, level=0, canary=canary) for _ in range(3))]
    return write_run(folder, records, levels=[0])


def _compare(a: Path, b: Path, out: Path) -> Path:
    """``loadgen compare A B --out OUT``, which must succeed; OUT."""
    done = clikit.loadgen_process("compare", str(a), str(b), "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_runs_with_no_canary_in_common_are_said_to_have_none(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", "story", [1, 2, 3])
    b = _run(tmp_path / "b", "poem", [1, 2, 3])
    _compare(a, b, tmp_path / "cmp")
    for page in ("comparison.md", "comparison.html"):
        text = (tmp_path / "cmp" / page).read_text()
        assert "b and a have no canary in common: their references cannot be compared" in text, page
        assert "reference completions equal" not in text, page


def test_runs_sharing_a_canary_still_compare_their_references(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", "story", [1, 2, 3])
    b = _run(tmp_path / "b", "story", [1, 2, 3])
    _compare(a, b, tmp_path / "cmp")
    text = (tmp_path / "cmp" / "comparison.md").read_text()
    assert "every run's reference completions equal those of the run it is compared with" in text
    assert "no canary in common" not in text


def test_references_that_differ_are_said_to_differ_without_blaming_either_run(tmp_path: Path) -> None:
    """A cache-off cell compared with a prefix-cache one may be the run that answers as it should: the sentence
    says the two references differ, not that the later run "broke" the first's."""
    a = _run(tmp_path / "cache-on", "story", [1, 2, 3])
    b = _run(tmp_path / "cache-off", "story", [1, 2, 4])
    _compare(a, b, tmp_path / "cmp")
    for page in ("comparison.md", "comparison.html"):
        text = (tmp_path / "cmp" / page).read_text()
        said = text.replace("'", "&#x27;")  # the HTML page escapes the apostrophe
        assert "cache-off&#x27;s reference differs from cache-on&#x27;s: story at token 2" in said
        assert "broke" not in text, page
