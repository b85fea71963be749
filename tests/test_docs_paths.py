"""The docs name what the code has: every repository path and module the README and docs/ cite exists.

Files move (a package split, a floor added); a doc that still names the old place sends its reader
nowhere. Checked here: every backticked path that starts at a top-level folder of the repository
(`` `loadgen/core/record.py` ``, `` `tests/...` ``, a glob such as `` `benchmarks/h200/*.toml` ``) matches
a file or folder, and every backticked dotted name of a first-party module
(`` `reports.analysis.build.build_report` ``) names a module and, where it goes on, a name defined there. The
error-kind lists are checked against the one the records are written with.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from loadgen.core.record import ERROR_KINDS

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
TOP = ("loadgen", "collectors", "reports", "scenarios", "tools", "benchmarks", "tests", "docs", "docker", ".ci")
PACKAGES = ("loadgen", "collectors", "reports", "scenarios", "tools", "benchmarks")
SPAN = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(rf"(?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def spans(path: Path) -> list[str]:
    return SPAN.findall(path.read_text())


def path_words(span: str) -> list[str]:
    """The words of a span that are repository paths, without a test id, anchor, line number or punctuation."""
    words = []
    for word in span.split():
        if not word.startswith(tuple(f"{top}/" for top in TOP)) or any(c in word for c in "<>{}$"):
            continue
        words.append(re.split(r"::|#|:\d", word)[0].rstrip(",.;:)"))
    return words


def missing_path(word: str) -> bool:
    return not any(ROOT.glob(word)) if "*" in word else not (ROOT / word).exists()


def defined_names(module: Path) -> set[str]:
    """The names a module's top level defines or imports (what ``module.NAME`` can reach)."""
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def missing_module(dotted: str) -> bool:
    """No module for ``dotted``'s longest module prefix, or the name after it is not defined there."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:i])
        module = base / "__init__.py" if (base / "__init__.py").exists() else base.with_suffix(".py")
        if not module.exists():
            continue
        rest = parts[i:]
        return bool(rest) and rest[0] not in defined_names(module)
    return True


def test_every_backticked_repository_path_exists() -> None:
    stale = [
        f"{doc.relative_to(ROOT)}: {word}"
        for doc in DOCS
        for span in spans(doc)
        for word in path_words(span)
        if missing_path(word)
    ]
    assert stale == []


def test_every_backticked_module_name_exists() -> None:
    stale = [
        f"{doc.relative_to(ROOT)}: {span}"
        for doc in DOCS
        for span in spans(doc)
        if DOTTED.fullmatch(span) and missing_module(span)
    ]
    assert stale == []


def test_the_checks_catch_a_moved_path_and_module() -> None:
    assert path_words("python -m pytest tests/test_layout.py::test_x -q") == ["tests/test_layout.py"]
    assert not missing_path("loadgen/core/record.py") and not missing_path("benchmarks/h200/*.toml")
    assert missing_path("collectors/record.py") and missing_path("benchmarks/h200/*.nothing")
    assert not missing_module("loadgen.core.record.CanaryRecord") and not missing_module("loadgen.core.wire")
    assert missing_module("collectors.record") and missing_module("loadgen.core.record.NoSuchName")


def test_the_error_kind_lists_name_every_kind_the_records_use() -> None:
    design = (ROOT / "docs" / "design.md").read_text()
    row = next(line for line in design.splitlines() if line.startswith("| error, error kind |"))
    listed = SPAN.findall(row.split("one `error_kind`:", 1)[1].split("(", 1)[0])
    assert tuple(listed) == ERROR_KINDS
    faults = (ROOT / "docs" / "faults-and-secrets.md").read_text()
    rows = faults.split("| `error_kind` | what happened |\n|---|---|\n", 1)[1].split("\n\n", 1)[0]
    assert tuple(re.findall(r"^\| `([a-z_]+)` \|", rows, flags=re.MULTILINE)) == ERROR_KINDS
