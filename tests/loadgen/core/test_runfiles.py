"""``loadgen.core.runfiles`` and the commands that read and write run folders through it, on crafted folders.

A run folder arrives as a tarball or an issue attachment: each test makes a small run folder by hand
(``tests/reports/runkit``), plants a symbolic link, a FIFO or an oversized sparse file in it, and drives the
real CLI (in this process, ``tests.loadgen.cli.clikit``; in a child where the process itself matters) or the
helper itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.core.errors import RunFolderError
from loadgen.core.runfiles import (
    DOCUMENT_LIMIT,
    open_append,
    open_regular,
    output_folder,
    read_regular,
    write_file,
)
from tests.loadgen.cli.clikit import loadgen
from tests.reports.runkit import rec, write_run

ROOT = Path(__file__).resolve().parents[3]


def small_run(tmp_path: Path) -> Path:
    """A run folder of one canary: a baseline, then two records at level 1, one of them diverged."""
    return write_run(
        tmp_path / "run", [rec([1, 2], phase="baseline"), rec([1, 2], level=1), rec([1, 3], level=1)], levels=[1]
    )


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of the user's, outside the run folder, that no command may change."""
    path = tmp_path / "precious.txt"
    path.write_text("precious\n")
    return path


# --- writes -------------------------------------------------------------------------------------------------


def test_report_refuses_a_link_in_place_of_a_report_file(tmp_path: Path, victim: Path) -> None:
    run = small_run(tmp_path)
    (run / "report.md").symlink_to(victim)
    out = loadgen("report", str(run))
    assert out.returncode == 2, out.stderr
    assert f"{run / 'report.md'}: a symbolic link, not a regular file; refused" in out.stderr
    assert victim.read_text() == "precious\n" and (run / "report.md").is_symlink()


def test_report_never_writes_through_a_planted_temporary_name(tmp_path: Path, victim: Path) -> None:
    """The temporary file's name was ``.report.json.tmp-<pid>``: planted by the shell that then becomes the
    ``loadgen`` process (``exec`` keeps the pid), a link there took the whole report."""
    run = small_run(tmp_path)
    script = f'ln -s "$1" "$2/.report.json.tmp-$$" && exec "{sys.executable}" -m loadgen report "$2"'
    out = subprocess.run(
        ["sh", "-c", script, "sh", str(victim), str(run)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert victim.read_text() == "precious\n"
    assert (run / "report.json").is_file() and not (run / "report.json").is_symlink()


def test_export_refuses_a_link_in_place_of_its_csv(tmp_path: Path, victim: Path) -> None:
    run = small_run(tmp_path)
    (run / "canaries.csv").symlink_to(victim)
    out = loadgen("export", str(run))
    assert out.returncode == 2, out.stderr
    assert f"{run / 'canaries.csv'}: a symbolic link, not a regular file; refused" in out.stderr
    assert victim.read_text() == "precious\n"


def test_export_writes_fresh_files_and_replaces_old_ones(tmp_path: Path) -> None:
    run = small_run(tmp_path)
    (run / "canaries.csv").write_text("old\n")
    os.link(run / "canaries.csv", tmp_path / "hard-link")  # a rename replaces the name, never the file behind it
    out = loadgen("export", str(run))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "hard-link").read_text() == "old\n"
    assert (run / "canaries.csv").read_text().startswith('"canary_id"')
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]


def test_write_file_refuses_links_and_special_files_and_leaves_no_temporary(tmp_path: Path, victim: Path) -> None:
    (tmp_path / "link").symlink_to(victim)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    for name, kind in (
        ("link", "a symbolic link"),
        ("dangling", "a symbolic link"),
        ("fifo", "a FIFO"),
        ("folder", "a folder"),
    ):
        with pytest.raises(RunFolderError, match=re.escape(f"{name}: {kind}, not a regular file; refused")):
            write_file(tmp_path / name, b"x")
    assert victim.read_text() == "precious\n" and not (tmp_path / "nowhere").exists()
    write_file(tmp_path / "script.sh", "#!/bin/sh\n", mode=0o777)
    assert os.stat(tmp_path / "script.sh").st_mode & 0o100
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["link", "dangling", "fifo", "folder", "precious.txt", "script.sh"]
    )


def test_appends_never_follow_a_link(tmp_path: Path, victim: Path) -> None:
    (tmp_path / "engine.log").symlink_to(victim)
    with pytest.raises(RunFolderError, match=re.escape("engine.log: a symbolic link")):
        open_append(tmp_path / "engine.log")
    os.mkfifo(tmp_path / "locust.log")
    with pytest.raises(RunFolderError, match=re.escape("locust.log: a FIFO")):  # and does not wait for a reader
        open_append(tmp_path / "locust.log")
    with open_append(tmp_path / "new.log") as fh:
        fh.write(b"a\n")
    assert (tmp_path / "new.log").read_bytes() == b"a\n" and victim.read_text() == "precious\n"


def test_output_folder_is_fresh_or_holds_only_what_the_command_writes(tmp_path: Path, victim: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RunFolderError, match=re.escape("linked: a symbolic link where the output folder goes")):
        output_folder(tmp_path / "linked", ["a.txt"])
    mine = output_folder(tmp_path / "out", ["a.txt"])
    (mine / "a.txt").write_text("earlier\n")
    assert output_folder(mine, ["a.txt"]) == mine  # an earlier run of the same command: reused
    (mine / "b.txt").symlink_to(victim)
    with pytest.raises(RunFolderError, match=re.escape("already holds 'b.txt', which this command does not write")):
        output_folder(mine, ["a.txt", "c.txt"])
    (mine / "b.txt").unlink()
    (mine / "a.txt").unlink()
    (mine / "a.txt").symlink_to(victim)  # a name the command writes, but a link
    with pytest.raises(RunFolderError, match=re.escape("already holds 'a.txt'")):
        output_folder(mine, ["a.txt"])


# --- reads --------------------------------------------------------------------------------------------------


def test_report_refuses_a_canary_file_linked_out_of_the_folder(tmp_path: Path) -> None:
    run = small_run(tmp_path)
    outside = write_run(tmp_path / "other", [rec([5, 6], level=1)], levels=[1]) / "canaries.jsonl"
    (run / "canaries-more.jsonl").symlink_to(outside)
    out = loadgen("report", str(run))
    assert out.returncode == 2, out.stderr
    assert f"{run / 'canaries-more.jsonl'}: a symbolic link, not a regular file; refused" in out.stderr
    assert "Traceback" not in out.stderr


def test_report_does_not_hang_on_a_fifo(tmp_path: Path) -> None:
    run = small_run(tmp_path)
    os.mkfifo(run / "background.jsonl")
    out = subprocess.run(  # a child, so that a hang ends at a deadline (it blocked forever opening the FIFO)
        [sys.executable, "-m", "loadgen", "report", str(run)], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert out.returncode == 2, out.stderr
    assert f"{run / 'background.jsonl'}: a FIFO, not a regular file; refused" in out.stderr


def test_check_refuses_a_linked_manifest_and_an_oversized_process_file(tmp_path: Path) -> None:
    run = small_run(tmp_path)
    (tmp_path / "manifest.json").write_bytes((run / "manifest.json").read_bytes())
    (run / "manifest.json").unlink()
    (run / "manifest.json").symlink_to(tmp_path / "manifest.json")
    out = loadgen("check", str(run), "--max-unique", "2")
    assert out.returncode == 2 and f"{run / 'manifest.json'}: a symbolic link" in out.stderr, out.stderr
    (run / "manifest.json").unlink()
    (tmp_path / "manifest.json").rename(run / "manifest.json")
    with open(run / "process-1.json", "wb") as fh:  # sparse: no disk spent
        fh.truncate(DOCUMENT_LIMIT + 1)
    out = loadgen("report", str(run))
    assert out.returncode == 2, out.stderr
    assert f"{run / 'process-1.json'}: {DOCUMENT_LIMIT + 1:,} bytes, above the {DOCUMENT_LIMIT:,}" in out.stderr


def test_reads_take_regular_files_within_their_bound_only(tmp_path: Path) -> None:
    (tmp_path / "zero").symlink_to("/dev/zero")
    with pytest.raises(RunFolderError, match=re.escape("zero: a symbolic link")):
        open_regular(tmp_path / "zero")
    with pytest.raises(RunFolderError, match=re.escape("null: a device")):
        open_regular(Path("/dev/null"))
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(RunFolderError, match=re.escape("fifo: a FIFO")):
        read_regular(tmp_path / "fifo")
    (tmp_path / "doc.json").write_bytes(b"x" * 11)
    with pytest.raises(RunFolderError, match=re.escape("11 bytes, above the 10")):
        read_regular(tmp_path / "doc.json", limit=10)
    assert read_regular(tmp_path / "doc.json", limit=11) == b"x" * 11
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "missing")
