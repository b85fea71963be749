"""The ``e2e`` marker (tests/conftest.py, "The e2e marker"): the rule's inputs, each checked on its own.

``pytest -m "not e2e"`` is a fast lane only if everything that starts a real process carries the marker, and a
useful one only if what runs in-process does not. These tests check the rule on what was collected (module
names, the integration folder, the fixtures that start servers), on small functions whose answer is known, and
the run-time check that closes the rule's gap (a process started through a value the scan cannot see).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from loadgen.cli.main import main

TESTS = Path(__file__).resolve().parent

# The conftest fixtures that start a real server or engine. The rule finds them by reading their code; this list
# is the check that it does, and that every test using one, directly or through another fixture, is marked.
STARTING_FIXTURES = {
    "loadgen/conftest.py": ["fault_server", "engine_url"],
    "loadgen/engine/conftest.py": ["engine_process"],
}


def _conftest(relative: str) -> ModuleType:
    """A conftest module by its name in the tests package: the one pytest loaded, or imported now when this run did
    not collect its folder."""
    return importlib.import_module("tests." + relative.removesuffix(".py").replace("/", "."))


@pytest.fixture
def rule() -> ModuleType:
    """tests/conftest.py: the rule (``starts_process``, ``e2e_reason``) and the run-time check."""
    return _conftest("conftest.py")


def _path(item: pytest.Item) -> Path:
    return Path(str(item.path)).resolve()


def test_the_marker_is_registered_and_unknown_markers_are_errors(request: pytest.FixtureRequest) -> None:
    assert any(line.startswith("e2e:") for line in request.config.getini("markers"))
    assert request.config.option.strict_markers


def test_every_test_in_an_e2e_module_or_the_integration_folder_is_marked(request: pytest.FixtureRequest) -> None:
    named = [i for i in request.session.items if _path(i).name.endswith(("_e2e.py", "_browser.py"))]
    under = [i for i in request.session.items if _path(i).relative_to(TESTS).parts[0] == "integration"]
    assert [i.nodeid for i in named + under if i.get_closest_marker("e2e") is None] == []


def test_every_test_using_a_starting_fixture_is_marked(request: pytest.FixtureRequest) -> None:
    names = {name for fixtures in STARTING_FIXTURES.values() for name in fixtures}
    using = [i for i in request.session.items if names & set(getattr(i, "fixturenames", ()))]
    assert [i.nodeid for i in using if i.get_closest_marker("e2e") is None] == []


def test_the_rule_finds_the_starting_fixtures_by_their_code(rule: ModuleType) -> None:
    for relative, names in STARTING_FIXTURES.items():
        module = _conftest(relative)
        assert {name: bool(rule.starts_process(getattr(module, name))) for name in names} == dict.fromkeys(names, True)


def _child() -> None:
    subprocess.run([sys.executable, "-c", ""], check=True)


def _through_a_helper() -> None:
    _child()


def _imports_inside() -> None:
    import subprocess as sp

    sp.Popen(["true"]).wait()


def _cli_run() -> None:
    main(["run", "quickstart"])


def _cli_report() -> None:
    main(["report", "runs/x"])


def _pure() -> list[int]:
    return sorted({3, 1, 2})


@pytest.mark.parametrize(
    ("func", "starts"),
    [
        (_child, "subprocess.run"),
        (_through_a_helper, "_child → subprocess.run"),
        (_imports_inside, "subprocess.Popen"),
        (_cli_run, "loadgen.cli.main.main(['run', ...])"),
        (_cli_report, None),
        (_pure, None),
    ],
)
def test_the_rule_reads_what_a_function_starts(rule: ModuleType, func: object, starts: str | None) -> None:
    assert rule.starts_process(func) == starts


def test_a_process_start_is_seen_at_run_time(rule: ModuleType) -> None:
    """This test starts a process (so the rule marks it e2e) and the audit hook records it."""
    rule._spawned.clear()
    _child()
    assert rule._spawned and sys.executable in rule._spawned[0]


def test_an_unmarked_test_that_started_a_process_fails_at_teardown(rule: ModuleType) -> None:
    unmarked = SimpleNamespace(nodeid="tests/x.py::test_y", get_closest_marker=lambda name: None)
    report = pytest.TestReport("tests/x.py::test_y", ("x.py", 1, "test_y"), {}, "passed", None, "teardown")
    rule._spawned[:] = ["subprocess.Popen ['sleep', '1']"]
    try:
        hook = rule.pytest_runtest_makereport(unmarked, SimpleNamespace(when="teardown"))
        next(hook)
        with pytest.raises(StopIteration) as done:
            hook.send(report)
    finally:
        rule._spawned.clear()
    assert done.value.value is report and report.failed
    assert "started a process (subprocess.Popen ['sleep', '1']) but is not marked e2e" in str(report.longrepr)
