"""Process-wide settings of the test run: how many workers, one BLAS thread, no gevent monkey-patching.

``-n auto`` (pyproject.toml's addopts) starts two pytest-xdist workers per core, at most 8: about half
of an end-to-end test's time is spent waiting, not computing (test servers stream at a set token rate,
Locust's shape ticks once a second, a level settles), so one worker per core leaves the cores idle
about half the time (on 2 cores the suite took 10.7 min with 2 workers and 7.1 with 4 on the same
loaded machine). Past 8 the modules of a minute or more bound the suite. ``PYTEST_XDIST_AUTO_NUM_WORKERS``
or ``-n N`` overrides; ``-n 0`` runs in one process.

NumPy's OpenBLAS runs one thread per core unless told otherwise. The engine runs its matrix products
on one (``loadgen/engine/__main__.py``); tests that drive a scheduler in-process would use every core
for each small product, and with pytest-xdist's workers side by side those threads fight over the
same cores (the 64-batch test of ``test_engine_model.py``: 7 s instead of 3 alone, 20 to 90 s beside
another worker). So the variable is set here, before anything
imports NumPy, and every process a test starts inherits it.

The test process never monkey-patches the standard library with gevent.

Importing any ``locust`` module runs ``locust/__init__.py``, which calls ``gevent.monkey.patch_all()``
unless ``LOCUST_SKIP_MONKEY_PATCH`` is set. In the pytest process that would turn the threads of every
test collected after the first such import into greenlets (so a test's behaviour would depend on
collection order), and it deadlocks a pytest-xdist worker, whose message loop runs on a real thread
that the patched locks no longer wake. The few tests that use Locust's classes in-process
(``EventHook``, ``RequestStats``) need no patching; every real Locust run is a subprocess, which
patches as in production. So ``locust`` is imported here once, unpatched, before any test module,
and the variable is removed again so that those subprocesses do not inherit it.
"""

from __future__ import annotations

import builtins
import functools
import importlib
import inspect
import os
import sys
import types
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# Hypothesis times each example against a 200 ms deadline by default: a timing test, on cores shared by four
# workers and other jobs (a pure search test's example once took 353 ms in CI). Property tests here prove
# behaviour; speed is the benchmarks' (benchmarks/, docs/performance.md), so no example has a deadline.
settings.register_profile("shared-cores", deadline=None)
settings.load_profile("shared-cores")

_SKIP = "LOCUST_SKIP_MONKEY_PATCH"
_before = os.environ.get(_SKIP)
os.environ[_SKIP] = "1"
try:
    import locust  # noqa: F401  (imported for its side effect: the package is loaded without patching)
finally:
    if _before is None:
        del os.environ[_SKIP]
    else:
        os.environ[_SKIP] = _before


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Two workers per core, at most 8 (see the module docstring)."""
    if env := os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(env)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(2 * cores, 8)


def _patched() -> bool:
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and bool(monkey.is_module_patched("threading"))


@pytest.fixture(autouse=True)
def _no_gevent_patching() -> Iterator[None]:
    """Fails the test that monkey-patched this process (run Locust or ``patch_all`` in a subprocess)."""
    yield
    assert not _patched(), "this test monkey-patched the pytest process with gevent; do that in a subprocess"


# The e2e marker ------------------------------------------------------------------------------------------------------
#
# ``pytest -m "not e2e"`` is the inner loop: everything that runs inside the pytest process. A test is marked
# ``e2e`` at collection (below; ``reason=`` says which clause) when it starts a real process, server, Locust
# run or browser:
#
# 1. its module is named ``*_e2e.py`` or ``*_browser.py``, or lies under ``tests/integration/``; or
# 2. its own code, or the code of a fixture it uses (directly or through other fixtures), names a starter:
#    ``subprocess.run``/``Popen``/..., ``os.fork``/``system``, ``multiprocessing``, the launchers
#    (``start_embedded``, ``start_process``, ``spawn``, ``Launcher``, ``start_topology``), the studies
#    (``run``, ``run_matrix``, ``cold_boot``, ``onset``), ``ensure_server`` (llama.cpp), Playwright, or
#    ``loadgen.cli.main.main`` with one of the subcommands in ``CLI_STARTS`` among its constants; or calls a
#    function or ``with`` helper defined under ``tests/`` that does (``script_server``, ``engine_process``,
#    ``clikit.loadgen_run(...)``), followed through any depth; or
# 3. a parameter of it names such a fixture (``request.getfixturevalue(name)``).
#
# The scan reads names in compiled code, so it cannot see a process started through a value handed in at run
# time or deep in production code. An audit hook closes that gap: a test not marked ``e2e`` that starts a
# process (``subprocess``, ``os.fork``/``exec``/``system``/``posix_spawn``) fails at teardown and says so.
# Then mark it ``@pytest.mark.e2e``, name its module ``*_e2e.py``, or add the production entry point to
# ``_starters``. tests/test_markers.py checks the rule's inputs.

TESTS = Path(__file__).resolve().parent
E2E_MODULE_SUFFIXES = ("_e2e.py", "_browser.py")
E2E_FOLDERS = ("integration",)


def _starters() -> dict[int, str]:
    """id() of each object that starts a process when called, and its name."""
    import asyncio
    import concurrent.futures
    import multiprocessing
    import subprocess

    objects: list[tuple[object, str]] = [
        (getattr(subprocess, name), f"subprocess.{name}")
        for name in ("Popen", "run", "call", "check_call", "check_output", "getoutput", "getstatusoutput")
    ]
    for name in ("system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "spawnv", "spawnl"):
        objects += [(getattr(os, name), f"os.{name}")] if hasattr(os, name) else []
    objects += [
        (asyncio.create_subprocess_exec, "asyncio.create_subprocess_exec"),
        (asyncio.create_subprocess_shell, "asyncio.create_subprocess_shell"),
        (multiprocessing.Process, "multiprocessing.Process"),
        (multiprocessing.Pool, "multiprocessing.Pool"),
        (concurrent.futures.ProcessPoolExecutor, "ProcessPoolExecutor"),
    ]
    for module, names in (
        ("loadgen.launchers.process", ("start_embedded", "start_process")),
        ("loadgen.launchers.guard", ("spawn",)),
        ("loadgen.launchers.health", ("start_health_checked",)),
        ("loadgen.launchers.launcher", ("Launcher",)),
        ("loadgen.launchers.topology", ("start_topology",)),
        ("loadgen.studies.run", ("run",)),
        ("loadgen.studies.matrix", ("run_matrix",)),
        ("loadgen.studies.coldboot", ("cold_boot",)),
        ("loadgen.studies.onset", ("onset",)),
        ("tools.llamacpp.build", ("ensure_server",)),
        ("playwright.sync_api", ("sync_playwright",)),
    ):
        try:
            imported = importlib.import_module(module)
        except ImportError:
            continue
        objects += [(getattr(imported, name), f"{module}.{name}") for name in names if hasattr(imported, name)]
    return {id(obj): name for obj, name in objects}


# ``main([...])`` in-process starts an engine and Locust for these subcommands only (the test's code names one)
CLI_STARTS = frozenset({"run", "matrix", "onset", "coldboot", "serve"})


def _constants(codes: list[types.CodeType]) -> set[str]:
    return {const for code in codes for const in code.co_consts if isinstance(const, str)}


_STARTERS: dict[int, str] = {}
_STARTER_MODULES: set[str] = set()


def _cli_main() -> object:
    return getattr(sys.modules.get("loadgen.cli.main"), "main", None)


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and the code of every function, lambda and comprehension inside it."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


@functools.cache
def _is_test_file(filename: str) -> bool:
    return Path(filename).resolve().is_relative_to(TESTS)


def _under_tests(obj: object) -> bool:
    code = getattr(obj, "__code__", None)
    return isinstance(code, types.CodeType) and _is_test_file(code.co_filename)


_found: dict[int, str | None] = {}  # id of a test or fixture function: what it starts (it lives as long as the run)


def starts_process(func: object, _seen: set[int] | None = None) -> str | None:
    """What ``func`` (a test or fixture function) starts, by name, or None: see the rule above."""
    if _seen is None:
        if id(func) not in _found:
            _found[id(func)] = starts_process(func, set())
        return _found[id(func)]
    if not _STARTERS:
        _STARTERS.update(_starters())
        _STARTER_MODULES.update(name.rpartition(".")[0] for name in _STARTERS.values())
        _STARTER_MODULES.update({"os", "posix", "subprocess", "asyncio", "multiprocessing", "concurrent.futures"})
    seen = _seen
    func = inspect.unwrap(func)  # type: ignore[arg-type]
    code = getattr(func, "__code__", None)
    if id(func) in seen or not isinstance(code, types.CodeType):
        return None
    seen.add(id(func))
    scope = {**vars(builtins), **getattr(func, "__globals__", {})}
    codes = list(_codes(code))
    names = {name for c in codes for name in c.co_names}
    for name in sorted(names):
        obj = scope.get(name, sys.modules.get(name))  # a module imported inside the function: not a global
        if id(obj) in _STARTERS:
            return _STARTERS[id(obj)]
        if obj is not None and obj is _cli_main() and (commands := sorted(CLI_STARTS & _constants(codes))):
            return f"loadgen.cli.main.main([{commands[0]!r}, ...])"
        if isinstance(obj, types.ModuleType) and obj.__name__ in _STARTER_MODULES:  # subprocess.run, study.run
            for attr in names & vars(obj).keys():
                if id(vars(obj)[attr]) in _STARTERS:
                    return _STARTERS[id(vars(obj)[attr])]
        if callable(obj) and _under_tests(inspect.unwrap(obj)) and (found := starts_process(obj, seen)):
            return f"{name} → {found}"
    return None


def e2e_reason(item: pytest.Item) -> str | None:
    """Why ``item`` is an end-to-end test, or None when it runs inside the pytest process (the rule above)."""
    path = Path(str(item.path)).resolve()
    if path.name.endswith(E2E_MODULE_SUFFIXES):
        return f"module *{next(s for s in E2E_MODULE_SUFFIXES if path.name.endswith(s))}"
    relative = path.relative_to(TESTS) if path.is_relative_to(TESTS) else path
    if relative.parts[0] in E2E_FOLDERS:
        return f"under tests/{relative.parts[0]}/"
    if isinstance(item, pytest.Function) and (found := starts_process(item.function)):
        return f"the test starts {found}"
    fixtures = item.session._fixturemanager
    parameters = getattr(getattr(item, "callspec", None), "params", {})
    named = [value for value in parameters.values() if isinstance(value, str) and value.isidentifier()]
    names = list(dict.fromkeys([*getattr(item, "fixturenames", ()), *named]))
    for name in names:  # grows: a fixture named by a parameter brings the fixtures it uses
        for definition in fixtures.getfixturedefs(name, item) or ():
            if found := starts_process(definition.func):
                return f"fixture {name} starts {found}"
            names += [arg for arg in definition.argnames if arg not in names]
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("e2e") is None and (reason := e2e_reason(item)):
            item.add_marker(pytest.mark.e2e(reason=reason))


_SPAWNS = frozenset({"subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec"})
_spawned: list[str] = []


def _audit(event: str, args: tuple[object, ...]) -> None:
    if event in _SPAWNS and len(_spawned) < 3:
        _spawned.append(f"{event} {args[1] if event == 'subprocess.Popen' else args[:1]!r}")


sys.addaudithook(_audit)  # for the process's life: an audit hook cannot be removed


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _spawned.clear()  # before any fixture of the test is set up, whatever its scope


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """The gap in the rule: a test not marked ``e2e`` that started a process fails at teardown and says so."""
    report = yield
    if call.when == "teardown" and _spawned and item.get_closest_marker("e2e") is None:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} started a process ({'; '.join(_spawned)}) but is not marked e2e: "
            "name its module *_e2e.py or mark it @pytest.mark.e2e (tests/conftest.py, 'The e2e marker')"
        )
    return report
