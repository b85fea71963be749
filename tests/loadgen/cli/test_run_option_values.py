"""Through the CLI's entry point: option values ``loadgen run`` and ``loadgen matrix`` cannot use end before anything
starts, with one line naming the option (exit 2). ``--levels ''`` was read as 'the scenario's levels' and
ran them; ``--ui --web-port 99999999`` gave Locust's traceback, then announced a run folder that never was.
The endpoint here is a port nothing listens on: a check that came after the probe would say so instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.loadgen.cli.clikit import loadgen


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["run", "--levels", ""], "--levels: expected comma-separated non-negative integers, got ''"),
        (["run", "--levels", " , "], "--levels: expected comma-separated non-negative integers, got ' , '"),
        (["run", "--ui", "--web-port", "99999999"], "--web-port: expected a port number 1..65535, got 99999999"),
        (["run", "--ui", "--web-port", "0"], "--web-port: expected a port number 1..65535, got 0"),
        (
            ["run", "--ui", "--api-key-env", "MY_KEY"],
            "--api-key-env goes without --ui (with --ui: set endpoint.api_key_env in the scenario)",
        ),
    ],
)
def test_an_unusable_value_ends_before_anything_starts(
    args: list[str], said: str, tmp_path: Path, free_port: int
) -> None:
    out = tmp_path / "runs"
    done = loadgen(*args, "--host", f"http://127.0.0.1:{free_port}/v1", "--out", str(out))
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == [f"loadgen run: error: {said}"]
    assert done.stdout == "" and not out.exists()


@pytest.mark.parametrize("value", ["sk-Aa1Bb2Cc3Dd4Ee5Ff6", "MY-KEY", ""])
def test_an_api_key_env_that_is_no_variable_name_is_refused_naming_the_option_not_the_value(
    value: str, tmp_path: Path, free_port: int
) -> None:
    out = tmp_path / "runs"
    done = loadgen("run", "--api-key-env", value, "--host", f"http://127.0.0.1:{free_port}/v1", "--out", str(out))
    assert done.returncode == 2, done
    assert "--api-key-env: field endpoint.api_key_env: " in done.stderr, done.stderr
    assert (value not in done.stderr if value else True) and not out.exists()


def test_matrix_refuses_empty_levels(tmp_path: Path) -> None:
    done = loadgen("matrix", "quickstart", "--levels", "", "--out", str(tmp_path / "m"))
    assert done.returncode == 2, done
    assert "--levels: expected comma-separated non-negative integers, got ''" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "m").exists()
