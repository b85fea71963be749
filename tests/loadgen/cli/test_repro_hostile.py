"""``loadgen repro`` on crafted run folders, through the CLI's entry point: no write through a planted link, no
value of the folder turned into a shell command.

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


def test_hostile_endpoint_values_stay_words_of_the_replay(tmp_path: Path) -> None:
    """The endpoint URL and the embedded engine's arguments come from the folder: each stays one word of
    ``replay.sh`` (read back with ``sh -n`` and ``shlex``, and run), and ``replay.toml`` reads back as TOML."""
    args = ["--logit-scale=1.0", "x'; touch PWNED; '", "$(touch PWNED)", "a\nb", "-"]
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
    words = shlex.split(script, comments=True)  # as sh splits it: a quoted line feed stays inside its word
    assert f"host={base}" not in words  # loadgen started the engine: the replay starts it again, no URL
    wanted = [f"--engine-arg={a}" for a in args]
    assert words[-len(wanted) - 1 :] == [*wanted, "$@"]
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
    assert orjson.loads(ran.stdout)[2:] == wanted  # each argument arrived whole
    assert not (tmp_path / "PWNED").exists() and not (folder / "PWNED").exists()
    assert tomllib.loads((folder / "replay.toml").read_text())["name"] == "repro-c0-3"


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
