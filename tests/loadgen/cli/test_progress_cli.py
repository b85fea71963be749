"""``loadgen run`` shows its progress for real: in place on a terminal (a pseudo-terminal here), as plain
lines when standard error is a pipe, not at all with ``--quiet``; then the verdict and the per-level
table in report.md's words, and the run folder last on standard output."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import orjson

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
SMALL = ("--levels", "0,2", "--canaries-per-level", "3")  # quickstart, 11 canaries: seconds on the embedded engine


def loadgen_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "loadgen", "run", "quickstart", *SMALL, *args]


def run_in_terminal(cmd: list[str], timeout_s: float = 240.0) -> tuple[int, bytes]:
    """Run ``cmd`` with stdin, stdout and stderr on a new pseudo-terminal 140 columns wide; all it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 140, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM", "COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        return proc.wait(timeout=30), bytes(out)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)


def report_of(run_dir: Path) -> dict[str, Any]:
    report: dict[str, Any] = orjson.loads((run_dir / "report.json").read_bytes())
    return report


def md_table(run_dir: Path) -> list[str]:
    """The per-level table of report.md, as its lines."""
    md = (run_dir / "report.md").read_text().splitlines()
    start = next(i for i, line in enumerate(md) if line.startswith("| concurrency |"))
    end = next(i for i in range(start, len(md)) if not md[i].startswith("|"))
    return md[start:end]


def test_a_terminal_sees_progress_updated_in_place_then_the_summary_and_the_run_folder_last(tmp_path: Path) -> None:
    code, raw = run_in_terminal(loadgen_cmd("--out", str(tmp_path)))
    assert code == 0, raw.decode(errors="replace")[-3000:]
    (run_dir,) = tmp_path.iterdir()
    # drawn in place: the view moves the cursor up and erases its lines to draw the next frame
    assert b"\x1b[1A\x1b[2K" in raw
    text = ANSI.sub(b"", raw).decode()
    frames = [m.start() for m in re.finditer(r"level 2 \(stage 4 of 4\): \d+/11 canaries", text)]
    assert len(frames) >= 2, text[-3000:]  # the same view, redrawn while level 2 ran
    assert re.search(r"level 2\s+3/3\s+0\s+\d+\s+\d+\s+\d/2", text)  # its row in the stage table, at the end
    lines = [line.strip("\r") for line in text.split("\n")]
    lines = [line for line in lines if line.strip()]
    assert lines[-1] == str(run_dir)  # the run folder, last
    report = report_of(run_dir)
    verdict = lines.index(report["verdict"])
    table = md_table(run_dir)
    assert len(table) == 4 and lines[verdict + 1 : verdict + 5] == table  # report.md's table, word for word
    assert lines[verdict + 5 : -1] == why_lines(report)  # then why it diverged, from the engine's steps
    assert frames[-1] < text.index(report["verdict"])  # the summary comes after the progress
    assert f"run folder {run_dir}" in text and "load done: 11/11 canaries, 0 errors in" in text


def test_a_log_sees_plain_lines_that_agree_with_the_report(tmp_path: Path) -> None:
    out = subprocess.run(loadgen_cmd("--out", str(tmp_path)), capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    (run_dir,) = tmp_path.iterdir()
    assert "\x1b" not in out.stderr  # no escape codes in a log
    err = out.stderr.splitlines()
    assert err[0] == "starting the embedded engine ..."
    assert re.fullmatch(r"engine ready at http://127\.0\.0\.1:\d+ in \d+\.\d s", err[1])
    assert err[2].startswith("probing http://127.0.0.1:") and err[3] == f"run folder {run_dir}"
    report = report_of(run_dir)
    done = [line for line in err if " done: canaries " in line]
    assert [line.split(" done:")[0] for line in done] == ["warm-up", "baseline", "level 0", "level 2"]
    for line, through in zip(done, [1, 5, 8, 11], strict=True):  # the canaries up to that stage, none later
        assert f"; {through}/11 canaries, " in line, line
    for line, level in zip(done[2:], report["levels"], strict=True):
        figures = f"canaries 3/3, unique {level['unique_completions']}, diverged {level['diverged']}, errors 0"
        assert figures in line, (line, level)
    assert err[-2].startswith("load done: 11/11 canaries, 0 errors in ") and err[-1] == "writing the reports ..."
    lines = out.stdout.splitlines()
    why = [line for sentence in why_lines(report) for line in (sentence, "")]
    assert lines == [report["verdict"], "", *md_table(run_dir), "", *why, str(run_dir)]


def test_an_engine_told_to_listen_on_every_address_is_said_before_it_starts(tmp_path: Path) -> None:
    """Scenario or command-line arguments that bind the engine to a reachable address get a warning, as the
    web UI's --web-host does; the run itself goes on."""
    cmd = [sys.executable, "-m", "loadgen", "run", "quickstart", "--levels", "0", "--canaries-per-level", "1"]
    out = subprocess.run(
        [*cmd, "--engine-arg=--host", "--engine-arg=0.0.0.0", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr
    err = out.stderr.splitlines()
    assert err[0] == (
        "warning: the embedded engine listens on 0.0.0.0 (the scenario's launcher host or --host): "
        "anyone who can reach this machine can send it requests"
    )
    assert err[1] == "starting the embedded engine ..."


def why_lines(report: dict[str, Any]) -> list[str]:
    """The summary's line for each canary the engine trace explains (the embedded engine writes one)."""
    return [f"Why: {c['engine_steps']['sentence']}" for c in report["canaries"] if "engine_steps" in c]


def test_quiet_shows_neither_progress_nor_summary(tmp_path: Path, engine_url: str) -> None:
    out = subprocess.run(
        loadgen_cmd("--out", str(tmp_path), "--host", engine_url, "--quiet"),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr
    (run_dir,) = tmp_path.iterdir()
    assert out.stderr == "" and out.stdout == f"{run_dir}\n"
    assert report_of(run_dir)["run"]["status"] == "finished"


TWO_CANARIES = """
name = "two-canaries"
[[canaries]]
id = "a"
prompt = "The history of the old harbour town begins with"
max_tokens = 16
[[canaries]]
id = "b"
prompt = "Once upon a time in a small village there lived"
max_tokens = 16
[background]
seed = 7
prompt_words = [8, 40]
max_tokens = [16, 48]
[sweep]
levels = [0, 4]
canaries_per_level = 2
warmup = 1
baseline = 2
"""


def test_progress_counts_the_whole_level_over_processes_and_unique_per_canary(tmp_path: Path) -> None:
    """Two load processes hold level 4 between them: "held at send" counts both (one alone holds 2). Two
    canaries that each gave one completion alone are "unique 1", as each canary's report row says, not 2."""
    scenario = tmp_path / "two.toml"
    scenario.write_text(TWO_CANARIES)
    cmd = [sys.executable, "-m", "loadgen", "run", str(scenario), "--processes", "2", "--out", str(tmp_path / "runs")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    done = {line.split(" done:")[0]: line for line in out.stderr.splitlines() if " done: canaries " in line}
    assert "held at send 4/4;" in done["level 4"], done["level 4"]
    baseline = [c["reference"]["unique_completions"] for c in report_of(run_dir)["canaries"]]
    assert baseline == [1, 1]  # alone, each canary always matched itself
    assert "canaries 4/4, unique 1, errors 0" in done["baseline"], done["baseline"]
