"""Through the real CLI (``python -m loadgen``): the small refusals say one line, with the form that works.

A bad ``--engine-arg`` is the engine parser's one line (not its whole usage) and leaves no ``engine.log`` in the
folder runs go to (nor an empty ``runs/`` in the working folder); ``--engine-arg --flag`` with a space is refused
with the ``=`` form; a misspelled shipped scenario is named with the nearest name and every shipped one;
``loadgen serve`` on a port taken by another socket says so and nothing more (no aiohttp warning of a client
session it never closed); every command that writes a folder prints it last.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from scenarios import names
from tests.loadgen.cli import clikit
from tests.reports.runkit import rec, write_run


@pytest.mark.parametrize("scenario", ["quickstart", "cold-boot"])  # the embedded engine, and a scenario's [launcher]
def test_an_engine_argument_the_engine_refuses_is_one_line_and_keeps_no_log(tmp_path: Path, scenario: str) -> None:
    out = tmp_path / "runs"
    done = clikit.loadgen_process("run", scenario, "--out", str(out), "--engine-arg=--max-num-seqs=x")
    assert done.returncode == 2, done.stdout + done.stderr
    line = done.stderr.splitlines()[-1]
    assert line.startswith("loadgen run: error: the engine refused its arguments: loadgen serve: error: ")
    assert "argument --max-num-seqs: invalid int value: 'x'" in line and "(command: " in line
    assert "usage:" not in done.stderr and done.stdout == ""
    assert not list(out.rglob("*")), list(out.rglob("*"))  # no engine.log, no engine-failed.txt


@pytest.mark.parametrize("command", ["run", "onset"])
def test_an_engine_argument_the_engine_refuses_leaves_no_runs_folder_in_the_working_folder(
    tmp_path: Path, command: str
) -> None:
    """Without ``--out`` the run folders go to ``runs/`` in the working folder: an engine that never started
    leaves it as it was, with no empty ``runs/`` (nor a study folder, nor an engine log) made on the way."""
    done = clikit.loadgen_process(command, "quickstart", "--engine-arg=--max-num-seqs=x", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "the engine refused its arguments" in done.stderr.splitlines()[-1]
    assert not list(tmp_path.iterdir()), list(tmp_path.rglob("*"))


def test_an_engine_flag_after_a_space_is_refused_with_the_equals_form(tmp_path: Path) -> None:
    done = clikit.loadgen_process("run", "--engine-arg", "--batch-invariant", "--out", str(tmp_path / "runs"))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == (
        "loadgen run: error: argument --engine-arg: expected one argument; an engine flag goes after '=': "
        "--engine-arg=--batch-invariant"
    )
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", ["run", "matrix", "coldboot"])
def test_a_misspelled_scenario_name_lists_the_shipped_ones(tmp_path: Path, command: str) -> None:
    done = clikit.loadgen_process(command, "quikstart", "--out", str(tmp_path / "runs"))
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line == (
        f"loadgen {command}: error: quikstart: not a file, nor a shipped scenario (did you mean quickstart? "
        f"shipped: {', '.join(names())})"
    )


def test_serve_on_a_busy_port_says_so_and_nothing_more() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # a decode server with a KV peer opens an HTTP client session at startup: the busy port must close it
        done = clikit.loadgen_process("serve", "--port", str(port), "--role", "decode", "--kv-peers", "127.0.0.1:9")
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"loadgen serve: cannot listen on 127.0.0.1:{port}: ") and "address already in use" in line


def test_every_command_on_a_run_folder_prints_its_folder_last(tmp_path: Path) -> None:
    """``report``, ``export``, ``compare`` and ``repro`` end with the folder they wrote into, as ``run``, ``onset``,
    ``coldboot`` and ``matrix`` do: a script takes it from the last line."""
    records = [rec([1, 2, 3], phase="baseline"), rec([1, 2, 3], level=0), rec([1, 2, 4], level=0)]
    run_dir, other = write_run(tmp_path / "a", records, levels=[0]), write_run(tmp_path / "b", records, levels=[0])
    repro_dir = tmp_path / "repro"
    for args, folder in (
        (["report", str(run_dir)], run_dir),
        (["report", str(run_dir), "--quiet"], run_dir),
        (["export", str(run_dir), "--out", str(tmp_path / "exp")], tmp_path / "exp"),
        (["compare", str(run_dir), str(other), "--out", str(tmp_path / "cmp")], tmp_path / "cmp"),
        (["repro", str(run_dir), "--canary", "c0", "--out", str(repro_dir)], repro_dir),
    ):
        done = clikit.loadgen_process(*args)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.splitlines()[-1] == str(folder), (args, done.stdout)
        assert folder.is_dir()
