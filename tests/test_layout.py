"""The layout by process, checked: who may import Locust and gevent, no import cycles, a light engine.

Walks every first-party module's imports with ``ast`` (function-level imports included, ``TYPE_CHECKING``
blocks excluded), so a new import that breaks a boundary fails here, not in a user's process.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("loadgen", "collectors", "reports", "scenarios", "tools")
LOAD_ONLY = ("locust", "gevent", "geventhttpclient")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path) -> set[str]:
    """Every module name ``path`` imports, resolved to absolute names."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def first_party() -> dict[str, set[str]]:
    modules = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        graph[name] = {m for m in imports_of(path) if m in modules and m != name}
    return graph


def test_only_the_load_package_imports_locust_or_gevent() -> None:
    offenders = []
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            name = module_name(path)
            if name == "loadgen.load" or name.startswith("loadgen.load."):
                continue
            bad = {m for m in imports_of(path) if m.split(".")[0] in LOAD_ONLY}
            if bad:
                offenders.append(f"{name}: {sorted(bad)}")
    assert offenders == []


def test_the_import_graph_has_no_cycles() -> None:
    graph = first_party()
    # an import of a package also runs its __init__: count that edge
    for name in list(graph):
        parent = name.rpartition(".")[0]
        if parent in graph:
            graph[name].add(parent)
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt.startswith(node + "."):
                continue  # a package importing its own submodule is how packages re-export
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)
    assert cycles == []


def test_reports_and_collectors_stay_out_of_the_load_path() -> None:
    graph = first_party()
    for name, deps in graph.items():
        if name.split(".")[0] in ("reports", "collectors"):
            assert not {d for d in deps if d.startswith(("loadgen.load", "loadgen.studies", "loadgen.cli"))}, name


def test_the_installed_package_does_not_ship_ci_tooling() -> None:
    import tomllib

    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert not any(pattern.startswith("tools") for pattern in found["include"])


def test_serve_starts_the_engine_without_pandas_or_the_load_stack() -> None:
    """A real ``loadgen serve`` up to READY, its imports listed by ``-X importtime``."""
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "loadgen", "serve", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY "), line
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    imported = {row.split("|")[-1].strip() for row in err.splitlines() if row.startswith("import time:")}
    assert "loadgen.engine.server" in imported
    heavy = {m for m in imported if m.split(".")[0] in ("pandas", "pyarrow", "gevent", "locust", "reports")}
    assert heavy == set()
