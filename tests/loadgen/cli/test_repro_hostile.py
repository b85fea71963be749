"""``loadgen repro`` on crafted run folders, through the CLI's entry point: no write through a planted link, no
value of the folder turned into a shell command (what the folder's engine and endpoint may make a replay run or
send: ``test_repro_replay_hostile.py``).

Each run folder is written by hand (``tests/reports/runkit``): one canary, a baseline and two records at level 1,
the last diverged (so the default reproducer is ``repro-c0-3``). Then a link, a newline or a quote is planted.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import orjson
import pytest

from reports.repro.folder import FILES
from tests.loadgen.cli.clikit import loadgen
from tests.reports.runkit import rec, write_run


def small_run(tmp_path: Path, canary: str = "c0", **manifest: Any) -> Path:
    records = [rec([1, 2], phase="baseline", canary=canary), rec([1, 2], level=1, canary=canary)]
    return write_run(tmp_path / "run", [*records, rec([1, 3], level=1, canary=canary)], levels=[1], **manifest)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "precious.txt"
    path.write_text("precious\n")
    path.chmod(0o600)
    return path


def test_a_linked_output_folder_is_refused(tmp_path: Path) -> None:
    run = small_run(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "repro-c0-3").symlink_to(elsewhere)
    out = loadgen("repro", str(run), "--canary", "c0")
    assert out.returncode == 2, out.stderr
    assert f"{run / 'repro-c0-3'}: a symbolic link where the output folder goes; refused" in out.stderr
    assert list(elsewhere.iterdir()) == []


def test_a_link_inside_the_output_folder_is_neither_written_nor_made_executable(tmp_path: Path, victim: Path) -> None:
    run = small_run(tmp_path)
    (run / "repro-c0-3").mkdir()
    (run / "repro-c0-3" / "replay.sh").symlink_to(victim)
    out = loadgen("repro", str(run), "--canary", "c0")
    assert out.returncode == 2, out.stderr
    assert "already holds 'replay.sh', which this command does not write" in out.stderr
    assert victim.read_text() == "precious\n" and victim.stat().st_mode & 0o777 == 0o600


def test_a_folder_of_its_own_is_written_again_and_nothing_else_is_reused(tmp_path: Path) -> None:
    run = small_run(tmp_path)
    assert loadgen("repro", str(run), "--canary", "c0").returncode == 0
    again = loadgen("repro", str(run), "--canary", "c0")
    assert again.returncode == 0, again.stderr
    folder = run / "repro-c0-3"
    assert sorted(p.name for p in folder.iterdir()) == sorted(FILES)
    assert os.access(folder / "replay.sh", os.X_OK)
    (folder / "notes.txt").write_text("mine\n")  # a file repro never writes: the folder is not its own any more
    third = loadgen("repro", str(run), "--canary", "c0")
    assert third.returncode == 2 and "already holds 'notes.txt'" in third.stderr, third.stderr


@pytest.mark.parametrize(
    ("manifest", "field"),
    [
        ({"run_id": "run-test\ntouch PWNED"}, "field run_id"),
        ({"labels": {"team": "a\ntouch PWNED"}}, "labels"),
        ({"labels": {"team\ntouch PWNED": "a"}}, "labels"),
        ({"scenario": {"name": "t", "labels": {"x": "\x1b]0;title\x07"}}}, "scenario.labels.x"),
        ({"scenario": {"name": "t", "canaries": [{"id": "c0\ntouch PWNED", "prompt": "p"}]}}, "scenario.canaries.0.id"),
        (
            {"endpoint": {"base_url": "http://127.0.0.1:1", "kind": "completions", "api_key_env": 'K"$(touch PWNED)"'}},
            "endpoint.api_key_env",
        ),
    ],
)
def test_control_characters_and_shell_in_manifest_names_are_refused(
    tmp_path: Path, manifest: dict[str, Any], field: str
) -> None:
    """A newline in the run id was a command of ``replay.sh`` (its comment ended there); a label's, the header of
    ``replay.toml``'s; an ``api_key_env`` landed as ``$NAME`` in the script and in the README's curl line."""
    run = small_run(tmp_path, **manifest)
    out = loadgen("repro", str(run), "--canary", "c0")
    assert out.returncode == 2, out.stderr
    assert f"{run / 'manifest.json'}: " in out.stderr and field in out.stderr and "Traceback" not in out.stderr
    assert not [p for p in run.iterdir() if p.name.startswith("repro-")]


def test_a_canary_id_with_a_newline_is_refused(tmp_path: Path) -> None:
    """Records carry their canary id; one with a newline named the folder and ended replay.sh's comment."""
    canary = "c0\ntouch PWNED"
    run = small_run(tmp_path, canary=canary)
    out = loadgen("repro", str(run), "--canary", canary)
    assert out.returncode == 2, out.stderr
    assert "--canary 'c0\\ntouch PWNED': expected letters, digits, '_', '.' or '-' only" in out.stderr
    assert not [p for p in run.iterdir() if p.name.startswith("repro-")]


def test_hostile_endpoint_values_stay_out_of_the_script_and_whole_in_the_launcher(tmp_path: Path) -> None:
    """The endpoint URL and the embedded engine's arguments come from the folder: the URL reaches neither file of
    the replay, and each argument is one element of ``replay.toml``'s ``[launcher].args`` (read back with
    ``tomllib``) and one word of the command the README and ``replay.sh`` show (``shlex``); ``replay.sh`` runs with
    no word of the folder's (run, with a ``$LOADGEN`` that echoes its arguments)."""
    args = ["--logit-scale=1.0", "x'; touch PWNED; '", "$(touch PWNED)", "-"]
    engine = {
        "kind": "embedded",
        "command": ["-P", "-m", "loadgen.engine", "--host", "127.0.0.1", "--port", "0", *args],
    }
    base = "http://127.0.0.1:1/$(touch PWNED)"
    run = small_run(tmp_path, engine=engine, endpoint={"base_url": base, "kind": "completions"})
    out = loadgen("repro", str(run), "--canary", "c0")
    assert out.returncode == 0, out.stderr
    folder = run / "repro-c0-3"
    script = (folder / "replay.sh").read_text()
    assert subprocess.run(["sh", "-n", str(folder / "replay.sh")], capture_output=True).returncode == 0
    replay = tomllib.loads((folder / "replay.toml").read_text())
    assert replay["launcher"] == {"kind": "embedded", "args": args, "require_approval": True}
    assert "base_url" not in replay["endpoint"] and "PWNED" not in script.replace(shown := _shown(script), "")
    assert shlex.split(shown)[-len(args) :] == args
    echo = tmp_path / "echo.py"
    echo.write_text("import sys, json; print(json.dumps(sys.argv[1:]))\n")
    ran = subprocess.run(
        ["sh", str(folder / "replay.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "LOADGEN": f"{sys.executable} {echo}"},
    )
    assert ran.returncode == 0, ran.stderr
    assert orjson.loads(ran.stdout) == ["run", str(folder / "replay.toml")]
    assert not (tmp_path / "PWNED").exists() and not (folder / "PWNED").exists()
    assert replay["name"] == "repro-c0-3"


@pytest.mark.parametrize("arg", ["a\nb", "\x1b]0;title\x07", "rtl\u202eevil"])
def test_an_engine_command_that_cannot_be_shown_is_refused(tmp_path: Path, arg: str) -> None:
    """A replay shows the command it would start before it starts it; one a terminal would break or hide is
    refused (no reproducer), as the approval would refuse it."""
    engine = {"kind": "embedded", "command": ["-P", "-m", "loadgen.engine", "--host", "127.0.0.1", "--port", "0", arg]}
    run = small_run(tmp_path, engine=engine)
    out = loadgen("repro", str(run), "--canary", "c0")
    assert out.returncode == 2, out.stderr
    assert f"{run / 'manifest.json'}: the engine's command holds a control character" in out.stderr
    assert not [p for p in run.iterdir() if p.name.startswith("repro-")]


def _shown(script: str) -> str:
    """The engine's command as ``replay.sh`` shows it: the comment line after the one that announces it."""
    lines = script.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("# Without BASE_URL it starts the engine"))
    return lines[at + 1].removeprefix("#   ")


def test_a_label_with_a_newline_is_refused_before_any_run(tmp_path: Path) -> None:
    """Labels go into the manifest and from there into every reproducer: refused where they are given."""
    out = loadgen(
        "run",
        "quickstart",
        "--host",
        "http://127.0.0.1:9",
        "--label",
        "team=a\ntouch PWNED",
        "--out",
        str(tmp_path / "runs"),
    )
    assert out.returncode == 2, out.stderr
    assert "--label: field labels: label 'team': holds the control character '\\n'" in out.stderr
    assert not (tmp_path / "runs").exists()
