"""``loadgen run --ui`` on the embedded engine through the real CLI: the terminal, the run folder, its replay.

A start from the web UI's form runs on the engine ``loadgen run`` started: the terminal shows that run as a
headless run shows it (progress on stderr, the summary and the run folder last on stdout), Ctrl-C (SIGINT)
ends the session without Locust's traceback or stats tables, and the run folder records the engine
(``engine`` in the manifest, ``engine.log``) as a headless run's does. So its reproducer starts an engine of
its own: ``sh replay.sh`` with no URL, in an environment whose PATH has no ``loadgen`` (the README's set-up
installs into a virtualenv it never activates), shows that engine's command, and once it is approved replays
the record.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from collectors.jsonl import read_jsonl
from loadgen.core.manifest import read_manifest


def _start_from_form(base: str, form: dict[str, str]) -> None:
    req = urllib.request.Request(base + "/swarm", data=urllib.parse.urlencode(form).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert json.loads(resp.read())["success"] is True


def test_a_web_ui_run_is_shown_like_a_headless_one_and_its_reproducer_replays_on_an_engine_of_its_own(
    tmp_path: Path, free_port: int, wait_http: Callable[[str], None]
) -> None:
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    runs = tmp_path / "runs"
    cmd = ["run", "--ui", "--web-port", str(free_port), "--out", str(runs), "--levels", "0,1"]
    with open(out, "wb") as stdout, open(err, "wb") as stderr:  # files: Locust logs a lot, a pipe could fill
        proc = subprocess.Popen([sys.executable, "-m", "loadgen", *cmd], stdout=stdout, stderr=stderr)
    try:
        base = f"http://127.0.0.1:{free_port}"
        wait_http(base + "/")
        _start_from_form(base, {"levels": "0,1", "canaries_per_level": "2"})
        deadline = time.monotonic() + 120
        while not any(line.startswith(str(runs) + "/") for line in out.read_text().splitlines()):
            assert time.monotonic() < deadline and proc.poll() is None, err.read_text()[-2000:]
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err.read_text()[-2000:]
    (run_dir,) = [p.parent for p in runs.glob("*/manifest.json")]
    lines, shown = out.read_text().splitlines(), err.read_text()
    assert lines[-1] == str(run_dir)  # the run folder last, not the folder that receives them
    report = json.loads((run_dir / "report.json").read_text())
    assert lines[0] == report["canaries"][0]["verdict"]  # the summary, as headless
    assert f"run folder {run_dir}" in shown and "load done: 9/9 canaries, 0 errors in " in shown
    done = [line for line in shown.splitlines() if " done: canaries " in line]
    assert [line.split(" done:")[0] for line in done] == ["warm-up", "baseline", "level 0", "level 1"]
    for line, through in zip(done, [1, 5, 7, 9], strict=True):  # counts of that stage's end, none later
        assert f"; {through}/9 canaries, " in line, line
    assert "KeyboardInterrupt" not in shown and "Aggregated" not in shown and "Traceback" not in shown
    assert "Aggregated" in (runs / "locust-ui.log").read_text()  # Locust's tables went to its log

    # the engine, recorded as a headless run records it
    manifest = read_manifest(run_dir)
    assert manifest.engine is not None and manifest.engine["kind"] == "embedded"
    assert (run_dir / "engine.log").is_file()

    made = subprocess.run(
        [sys.executable, "-m", "loadgen", "repro", str(run_dir), "--canary", "story", "--record", "9"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    folder = Path(made.stdout.strip().removeprefix("wrote "))
    assert "base_url" not in (folder / "replay.toml").read_text()  # not the old engine's port: a new engine
    clean = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path))}  # no loadgen on PATH
    clean.update({k: v for k, v in os.environ.items() if k == "PYTHONPATH"})  # a checkout's loadgen stays the one
    replay = ["sh", str(folder / "replay.sh"), "--out", str(tmp_path / "replays"), "--canaries-per-level", "1"]
    asked = subprocess.run(replay, capture_output=True, text=True, timeout=60, env=clean)
    assert asked.returncode == 2 and "require_approval" in asked.stderr, asked.stderr[-2000:]  # the engine: approved
    digest = asked.stderr.split("LOADGEN_APPROVE_ENGINE=", 1)[1].split()[0]
    again = subprocess.run(
        replay, capture_output=True, text=True, timeout=240, env={**clean, "LOADGEN_APPROVE_ENGINE": digest}
    )
    assert again.returncode == 0, again.stderr[-2000:]
    (replay_dir,) = (tmp_path / "replays").iterdir()
    assert again.stdout.splitlines()[-1] == str(replay_dir)
    assert read_manifest(replay_dir).engine is not None  # it started an engine of its own
    swept = [r for r in read_jsonl(replay_dir / "canaries.jsonl").rows if r["phase"] == "sweep"]
    assert len(swept) == 1 and swept[0]["level"] == 1
