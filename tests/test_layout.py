"""The layout by process, checked: who may import Locust and gevent, no import cycles, a light engine.

Walks every first-party module's imports with ``ast`` (function-level imports included, ``TYPE_CHECKING``
blocks excluded), so a new import that breaks a boundary fails here, not in a user's process.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

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
        for inner in ast.iter_child_nodes(node):
            visit(inner)

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


# The floors of the house, ground first (docs/design.md, "The house"). A module may import its own
# package and any package on a lower floor; never a package beside it or above it.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("loadgen.core",),  # the shared vocabulary: imports nothing else of the project
    ("collectors", "loadgen.engine", "loadgen.plugins", "scenarios"),  # plugins: inside a foreign engine
    ("reports",),
    ("loadgen.launchers",),
    ("loadgen.runs",),  # a run folder's birth and end: below both the Locust side and the studies
    ("loadgen.load",),
    ("loadgen.studies",),
    ("loadgen.cli",),
    ("loadgen.__main__", "tools"),  # entry points: ``python -m loadgen``, CI's own tooling
)
ROOT_MODULE = "loadgen"  # the package's own __init__: the version, importable from anywhere but the ground


def package_of(module: str) -> str:
    """The package a module belongs to, as ``FLOORS`` names them."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "loadgen" and len(parts) > 1 else parts[0]


def floor_of(package: str) -> int:
    for i, floor in enumerate(FLOORS):
        if package in floor:
            return i
    raise AssertionError(f"{package}: on no floor of tests/test_layout.py's FLOORS; give it one")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import that reaches beside or above its own floor, as ``module -> module``."""
    bad = []
    for name, deps in sorted(graph.items()):
        if name == ROOT_MODULE:
            continue
        mine = package_of(name)
        for dep in sorted(deps):
            if dep == ROOT_MODULE:
                if floor_of(mine) == 0:
                    bad.append(f"{name} -> {dep}")
                continue
            theirs = package_of(dep)
            if theirs != mine and floor_of(theirs) >= floor_of(mine):
                bad.append(f"{name} -> {dep}")
    return bad


def test_every_package_stands_on_a_floor() -> None:
    for name in first_party():
        if name != ROOT_MODULE:
            floor_of(package_of(name))


def test_nothing_imports_upward_or_sideways() -> None:
    assert upward_imports(first_party()) == []


def test_the_ground_floor_imports_nothing_else_of_the_project() -> None:
    graph = first_party()
    ground = {n: d for n, d in graph.items() if package_of(n) == "loadgen.core"}
    assert ground, "loadgen.core is missing"
    assert {n: sorted(d) for n, d in ground.items() if any(not x.startswith("loadgen.core") for x in d)} == {}


def test_the_layout_test_catches_an_upward_import() -> None:
    graph = {name: set(deps) for name, deps in first_party().items()}
    graph["loadgen.core.scenario.schema"].add("reports.claims")
    graph["loadgen.load.client"].add("loadgen.studies.run")
    assert upward_imports(graph) == [
        "loadgen.core.scenario.schema -> reports.claims",
        "loadgen.load.client -> loadgen.studies.run",
    ]


def test_no_package_cycle() -> None:
    graph = first_party()
    edges: dict[str, set[str]] = {}
    for name, deps in graph.items():
        edges.setdefault(package_of(name), set()).update(package_of(d) for d in deps if d != ROOT_MODULE)
    for pkg in edges:
        edges[pkg].discard(pkg)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(
            nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})) for nxt in edges.get(start, ())
        )

    assert sorted(p for p in edges if reaches(p, p, {p})) == []


# The rooms inside reports/ and collectors/ (docs/design.md, "The house"), lowest first: a room imports its own
# modules and rooms below it, never one beside or above it. ``reports`` itself holds no module but its rooms.
REPORT_ROOMS: tuple[tuple[str, ...], ...] = (
    ("reports.model",),  # the typed shapes of report.json and comparison.json: import nothing of reports
    ("reports.analysis",),  # pure analysis over the reader's columns
    ("reports.render",),  # the writers at the edge: Markdown, HTML, SVG, the files
    ("reports.compare", "reports.repro"),  # comparisons and reproducers, over all of the above
)
# collectors/ holds the writers that run in Locust processes; collectors.read, the report-side reader, is above them.
COLLECTOR_ROOMS: tuple[tuple[str, ...], ...] = (("collectors",), ("collectors.read",))
# What the Locust processes (loadgen.load, and loadgen.runs that they begin and end runs with) may import of the
# report side: the crossings docs/design.md names, and nothing else of reports or collectors.read.
LOCUST_SIDE = ("loadgen.load", "loadgen.runs")
LOCUST_CROSSINGS = frozenset(
    {
        "reports.model.report",  # the report's types
        "reports.analysis.verdict",  # the run's status rule (endpoint failed): pure, loads no numpy or pandas
        "reports.render.cells",  # the live table writes a finished level's cells as the report does
        "reports.render.svg",  # the live charts: the report's own line chart
        "reports.render.htmltext",  # ... escaped as the report escapes
        "reports.render.writer",  # only inside the function that ends a run this process owns (test_locust_imports)
    }
)


def room_of(module: str, rooms: tuple[tuple[str, ...], ...]) -> str | None:
    """The room a module belongs to (the longest room name it starts with), None outside them."""
    found = [r for floor in rooms for r in floor if module == r or module.startswith(r + ".")]
    return max(found, key=len) if found else None


def room_floor(room: str, rooms: tuple[tuple[str, ...], ...]) -> int:
    return next(i for i, floor in enumerate(rooms) if room in floor)


def room_crossings(graph: dict[str, set[str]], rooms: tuple[tuple[str, ...], ...]) -> list[str]:
    """Every import from one room into a room beside or above it, as ``module -> module``."""
    bad = []
    for name, deps in sorted(graph.items()):
        mine = room_of(name, rooms)
        if mine is None:
            continue
        for dep in sorted(deps):
            theirs = room_of(dep, rooms)
            if theirs is not None and theirs != mine and room_floor(theirs, rooms) >= room_floor(mine, rooms):
                bad.append(f"{name} -> {dep}")
    return bad


def test_reports_is_a_handful_of_rooms_by_job() -> None:
    rooms = {r for floor in REPORT_ROOMS for r in floor}
    found = {n for n in first_party() if n.startswith("reports.")}
    assert sorted(n for n in found if room_of(n, REPORT_ROOMS) is None) == []  # no module loose in reports/
    assert {".".join(n.split(".")[:2]) for n in found} == rooms


def test_the_rooms_import_downward_only() -> None:
    graph = first_party()
    assert room_crossings(graph, REPORT_ROOMS) == []
    assert room_crossings(graph, COLLECTOR_ROOMS) == []


def test_the_layout_test_catches_a_room_crossing() -> None:
    graph = {name: set(deps) for name, deps in first_party().items()}
    graph["reports.model.report"].add("reports.analysis.build")
    graph["reports.render.md"].add("reports.compare.runs")
    graph["collectors.jsonl"].add("collectors.read.runfolder")
    assert room_crossings(graph, REPORT_ROOMS) == [
        "reports.model.report -> reports.analysis.build",
        "reports.render.md -> reports.compare.runs",
    ]
    assert room_crossings(graph, COLLECTOR_ROOMS) == ["collectors.jsonl -> collectors.read.runfolder"]


def locust_side_crossings(graph: dict[str, set[str]]) -> list[str]:
    """Every import the Locust side makes of ``reports`` or ``collectors.read`` beyond ``LOCUST_CROSSINGS``."""
    bad = []
    for name, deps in sorted(graph.items()):
        if package_of(name) not in LOCUST_SIDE:
            continue
        for dep in sorted(deps):
            reader = package_of(dep) == "reports" or room_of(dep, COLLECTOR_ROOMS) == "collectors.read"
            if reader and dep not in LOCUST_CROSSINGS:
                bad.append(f"{name} -> {dep}")
    return bad


def test_the_locust_side_imports_no_reader() -> None:
    """``loadgen.load`` and ``loadgen.runs`` import of ``reports`` and ``collectors.read`` only the crossings named."""
    graph = first_party()
    assert locust_side_crossings(graph) == []
    used = {d for n, deps in graph.items() if package_of(n) in LOCUST_SIDE for d in deps}
    assert sorted(LOCUST_CROSSINGS - used) == []  # a crossing no longer used leaves the list


def test_the_layout_test_catches_a_reader_on_the_locust_side() -> None:
    graph = {name: set(deps) for name, deps in first_party().items()}
    graph["loadgen.load.live"].add("reports.analysis.build")
    graph["loadgen.runs.lifecycle"].add("collectors.read.runfolder")
    assert locust_side_crossings(graph) == [
        "loadgen.load.live -> reports.analysis.build",
        "loadgen.runs.lifecycle -> collectors.read.runfolder",
    ]


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


# What a parser's help may not load: the report and load stacks, and the libraries under them. Each subcommand
# module imports these inside the function that runs the command (docs/design.md, loadgen/cli/).
HELP_MUST_NOT_LOAD = ("pandas", "pyarrow", "numpy", "pydantic", "locust", "gevent", "geventhttpclient", "reports")
CLI_COMMANDS = sorted(p.stem for p in (ROOT / "loadgen" / "cli").glob("*.py") if p.stem not in ("__init__", "main"))


def heavy_imports(stderr: str) -> set[str]:
    """The modules ``-X importtime``'s lines in ``stderr`` name that no parser's help may load."""
    imported = {row.split("|")[-1].strip() for row in stderr.splitlines() if row.startswith("import time:")}
    return {
        m
        for m in imported
        if m.split(".")[0] in HELP_MUST_NOT_LOAD or m == "collectors.read" or m.startswith("collectors.read.")
    }


def test_heavy_imports_names_the_stacks() -> None:
    rows = "".join(
        f"import time: 1 | 1 | {m}\n"
        for m in ("argparse", "  pandas.core", "collectors.jsonl", "collectors.read.runfolder", "reports")
    )
    assert heavy_imports(rows) == {"pandas.core", "collectors.read.runfolder", "reports"}


@pytest.mark.parametrize(
    "argv", [["--help"], ["--version"], *([c, "--help"] for c in CLI_COMMANDS if c != "serve")], ids=" ".join
)
def test_help_and_version_load_no_report_or_load_stack(argv: list[str]) -> None:
    """A real ``loadgen --help``, ``--version`` and ``loadgen COMMAND --help``: every parser is built, and none of
    them loads pandas, pyarrow, the report stack or Locust (``serve --help`` is the engine's, tested above)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "loadgen", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage: loadgen" if argv != ["--version"] else "loadgen "), proc.stdout
    assert "loadgen.cli.main" in proc.stderr  # -X importtime's lines are there to read
    assert heavy_imports(proc.stderr) == set()


# Code that runs inside someone else's engine process (loadgen/plugins/): the standard library, orjson, the ground
# floor and the engine it plugs into (imported inside the function the engine calls), nothing heavier.
PLUGIN_MAY_IMPORT = ("orjson", "vllm", "loadgen.core", "loadgen.plugins")


def plugin_import_offenders(modules: dict[str, set[str]]) -> dict[str, list[str]]:
    """Per plugin module, what it imports beyond the standard library and ``PLUGIN_MAY_IMPORT``."""
    found: dict[str, list[str]] = {}
    for name, deps in modules.items():
        bad = [
            d
            for d in sorted(deps)
            if d.split(".")[0] not in sys.stdlib_module_names
            and not any(d == ok or d.startswith(ok + ".") for ok in PLUGIN_MAY_IMPORT)
        ]
        if bad:
            found[name] = bad
    return found


def test_the_plugins_import_only_the_standard_library_orjson_and_the_ground_floor() -> None:
    plugins = {module_name(p): imports_of(p) for p in (ROOT / "loadgen" / "plugins").rglob("*.py")}
    assert "loadgen.plugins.vllm_steps" in plugins
    assert plugin_import_offenders(plugins) == {}
    assert plugin_import_offenders({"loadgen.plugins.x": {"numpy", "loadgen.engine.model", "json"}}) == {
        "loadgen.plugins.x": ["loadgen.engine.model", "numpy"]
    }


def test_importing_the_vllm_plugin_loads_nothing_heavier() -> None:
    """A real interpreter's modules before and after ``import loadgen.plugins.vllm_steps``, ground floor included."""
    code = "import sys; s = set(sys.modules); import loadgen.plugins.vllm_steps; print(*sorted(set(sys.modules) - s))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    loaded = proc.stdout.split()
    assert "loadgen.core.steptrace" in loaded
    assert plugin_import_offenders({"loaded": {m for m in loaded if m != "loadgen"}}) == {}


# Module length (docs/design.md, "The house"): every production module stays under ``MAX_LINES``; one over
# ``EXPLAIN_FROM`` says why in a module docstring paragraph starting ``LENGTH_REASON``.
PRODUCTION = ("loadgen", "collectors", "reports", "scenarios", "tools", "benchmarks")
MAX_LINES = 500
EXPLAIN_FROM = 400
LENGTH_REASON = "Why this length:"


def says_why_long(source: str) -> bool:
    """The module docstring has a paragraph starting ``LENGTH_REASON`` followed by a sentence of words."""
    doc = ast.get_docstring(ast.parse(source)) or ""
    for paragraph in doc.split("\n\n"):
        if paragraph.startswith(LENGTH_REASON) and len(paragraph[len(LENGTH_REASON) :].split()) >= 8:
            return True
    return False


def length_problems(root: Path, packages: tuple[str, ...]) -> list[str]:
    """Each module under ``packages`` that is ``MAX_LINES`` lines or more, or over ``EXPLAIN_FROM`` without a reason."""
    bad = []
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            name, source = path.relative_to(root).as_posix(), path.read_text()
            lines = len(source.splitlines())
            if lines >= MAX_LINES:
                bad.append(f"{name}: {lines} lines, split it at a seam")
            elif lines > EXPLAIN_FROM and not says_why_long(source):
                bad.append(f"{name}: {lines} lines, no '{LENGTH_REASON}' paragraph in its docstring")
    return bad


def test_modules_stay_short_or_say_why() -> None:
    assert length_problems(ROOT, PRODUCTION) == []


def test_the_length_test_catches_a_long_module(tmp_path: Path) -> None:
    pkg = tmp_path / "loadgen"
    pkg.mkdir()
    body = "x = 1\n"
    reason = f'"""A module.\n\n{LENGTH_REASON} its one loop reads every field, split it and the fields scatter.\n"""\n'
    (pkg / "long.py").write_text('"""A module."""\n' + body * (MAX_LINES - 1))
    (pkg / "silent.py").write_text('"""A module."""\n' + body * EXPLAIN_FROM)
    (pkg / "terse.py").write_text(f'"""A module.\n\n{LENGTH_REASON} long.\n"""\n' + body * EXPLAIN_FROM)
    (pkg / "explained.py").write_text(reason + body * (EXPLAIN_FROM - 3))
    (pkg / "short.py").write_text('"""A module."""\n' + body * (EXPLAIN_FROM - 1))
    assert length_problems(tmp_path, ("loadgen",)) == [
        f"loadgen/long.py: {MAX_LINES} lines, split it at a seam",
        f"loadgen/silent.py: {EXPLAIN_FROM + 1} lines, no '{LENGTH_REASON}' paragraph in its docstring",
        f"loadgen/terse.py: {EXPLAIN_FROM + 4} lines, no '{LENGTH_REASON}' paragraph in its docstring",
    ]
