"""Through the real CLI (``python -m loadgen``): the small refusals say one line, with the form that works.

A bad ``--engine-arg`` is the engine parser's one line (not its whole usage) and leaves no ``engine.log`` in the
folder runs go to; ``--engine-arg --flag`` with a space is refused with the ``=`` form; a misspelled shipped
scenario is named with the nearest name and every shipped one; ``loadgen serve`` on a port taken by another
socket says so and nothing more (no aiohttp warning of a client session it never closed).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from scenarios import names
from tests.loadgen.cli import clikit


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
