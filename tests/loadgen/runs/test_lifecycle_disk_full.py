"""Through the real CLI: a disk that fills before a run ends (a real, small tmpfs, filled by the test while
the run waits for its second level) ends the run with a status and one line per file it could not write,
not a traceback from the manifest's write (``OSError: [Errno 28] No space left on device``, which left the
status ``running``, no report and a temporary file). Needs root for ``mount``; skipped, saying why, without.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.loadgen.fault_server import whole
from tests.loadgen.local_http import LocalServer, QuietHandler, serving
from tests.loadgen.scenariokit import tiny_scenario


class Handler(QuietHandler):
    def do_GET(self) -> None:
        if self.path == "/v1/models":
            return self.send_body(200, b'{"object": "list", "data": [{"id": "m"}]}')
        self.send_body(404, b"{}")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if body.get("prompt") != "ok":
            time.sleep(2)  # background: level 1 takes a few seconds to be held, while the test fills the disk
        self.send_body(200, json.dumps(whole()).encode())


@pytest.fixture
def server() -> Iterator[LocalServer]:
    with serving(LocalServer(("127.0.0.1", 0), Handler)) as srv:
        yield srv


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs of its own, unmounted at the end."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.decode().strip() or done.returncode})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path) -> None:
    with open(disk / "filler", "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
    assert os.statvfs(disk).f_bavail == 0


def test_a_disk_that_fills_before_the_end_gives_a_status_and_names_the_file(
    server: LocalServer, small_disk: Path, tmp_path: Path
) -> None:
    scenario = tmp_path / "full.toml"
    scenario.write_text(tiny_scenario("full", server.url, levels=[0, 1], background=True, settle_timeout_s=5))
    out = small_disk / "runs"
    cmd = [sys.executable, "-m", "loadgen", "run", str(scenario), "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):  # level 0's canary recorded: the run now waits for level 1
            records = list(out.glob("*/canaries.jsonl"))
            if records and records[0].read_bytes().endswith(b"\n"):
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        else:
            pytest.fail("level 0's canary never came")
        _fill(small_disk)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in stderr + stdout, stderr
    assert proc.returncode == 1, (stdout, stderr)
    (run_dir,) = out.iterdir()
    lines = stdout.splitlines()
    assert lines[-1] == str(run_dir)
    assert (
        f"Could not write the run's end (its manifest still says 'running'): {run_dir}/manifest.json: "
        "cannot write (No space left on device); "
        "what was written before stays." in lines
    ), stdout
    assert lines[0].startswith("run "), stdout  # a status other than 'finished' comes first
    assert not [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")]  # no temporary file left
