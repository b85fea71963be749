"""The ``loadgen`` command as tests call it: in this process, or as a real child running a scenario.

``loadgen(*args)`` calls ``loadgen.cli.main.main`` here, with standard output and error captured: a check of
argument parsing, usage errors, or ``report``/``check``/``compare``/``export``/``repro`` on a run folder learns
nothing more from a child process, and costs an interpreter start and every import per call. What a real
process proves (a run's engine and Locust, signals, a terminal, the environment a child sees) goes through
``loadgen_process`` (``python -m loadgen ARGS``), or ``loadgen_run``, which finds the one run folder a run wrote.
No helper asserts anything: each test says what it expects of the exit code and the output.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from loadgen.cli.main import main


@dataclass(frozen=True)
class Ran:
    """One in-process call: its exit code and what it wrote (the names ``subprocess.CompletedProcess`` uses)."""

    returncode: int
    stdout: str
    stderr: str


def loadgen(*args: str) -> Ran:
    """``loadgen ARGS`` in this process. argparse's ``SystemExit`` (a usage error, ``--help``) is its exit code."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return Ran(code, out.getvalue(), err.getvalue())


@dataclass(frozen=True)
class RealRun(Ran):
    """A ``loadgen run`` child that has ended, and the folder its run folders go to."""

    out: Path

    @property
    def run_dir(self) -> Path:
        """The run folder: the one thing under ``out`` (no second run folder, no temporary left behind)."""
        (found,) = self.out.iterdir()
        assert found.is_dir(), found
        return found


def loadgen_process(*args: str, timeout: float = 120, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m loadgen ARGS`` in a child process (in ``cwd``, else this one's), its output captured as text."""
    cmd = [sys.executable, "-m", "loadgen", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)


def loadgen_run(scenario: Path | str, out: Path, *args: str, timeout: float = 120) -> RealRun:
    """``python -m loadgen run SCENARIO --out OUT ARGS`` in a child process. ``scenario``: a file, or a
    scenario's TOML text (any string with a line break), written beside ``out`` as ``scenario.toml``."""
    if isinstance(scenario, str) and "\n" in scenario:
        text, scenario = scenario, out.parent / "scenario.toml"
        scenario.write_text(text)
    done = loadgen_process("run", str(scenario), "--out", str(out), *args, timeout=timeout)
    return RealRun(done.returncode, done.stdout, done.stderr, out)
