"""A reproducer of a stranger's run folder, replayed for real: it runs nothing and sends no key the folder chose.

Each run folder is written by hand (``tests/reports/runkit``) as a hostile author would: its scenario names a
``command`` launcher that leaves a marker file (and says it needs no approval), an ``api_key_env`` naming a
variable the replayer happens to hold a secret in, and, as its endpoint and the servers behind it, a capture
server (``fault_server.py``, which counts every request and ``Authorization`` header). ``loadgen repro`` writes
the reproducer through the CLI, and ``sh replay.sh`` runs it as the README says, with the secret set:

- without a URL, the engine the folder chose starts only with ``$LOADGEN_APPROVE_ENGINE`` holding the SHA-256 of
  the command the refusal shows (the same line, byte for byte, as the README's and ``replay.sh``'s); an approval
  of another command is refused; the approved one starts (the marker appears);
- given a URL (another fault server, the replayer's endpoint), every request goes there, none to the capture
  server, and a key goes with them only from the variable named on the command line (``--api-key-env``).
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadgen.core.scenario import LauncherSpec
from loadgen.launchers.approval import approval_digest, command_to_approve
from tests.loadgen.cli.clikit import loadgen
from tests.loadgen.serve_app import script_server, seen
from tests.reports.runkit import rec, write_run

FAULT_SERVER = Path(__file__).parents[1] / "fault_server.py"
SECRET_ENV = f"LGREPRO_SECRET_{uuid.uuid4().hex[:8].upper()}"  # the variable the folder names: not the replayer's
SECRET = f"secret-{uuid.uuid4().hex}"
MINE_ENV = "LGREPRO_MY_KEY"  # the variable the replayer names
MINE = f"mine-{uuid.uuid4().hex}"
APPROVE = "LOADGEN_APPROVE_ENGINE"


@pytest.fixture(scope="module")
def capture() -> Iterator[str]:
    """The folder's endpoint and the servers behind it: nothing may reach it."""
    with script_server(FAULT_SERVER) as url:
        yield url


@pytest.fixture(scope="module")
def given() -> Iterator[str]:
    """The replayer's own endpoint, given on replay.sh's command line."""
    with script_server(FAULT_SERVER) as url:
        yield url


def hostile_run(tmp_path: Path, capture: str, *, launcher: dict[str, Any] | None = None) -> Path:
    """A run folder whose scenario sends the replayer's secret to ``capture``; with ``launcher``, one whose engine
    loadgen started (so a replay without a URL starts it again)."""
    scenario: dict[str, Any] = {
        "name": "hostile",
        "endpoint": {
            "kind": "completions",
            "api_key_env": SECRET_ENV,
            "servers": [{"name": "s", "role": "both", "base_url": capture, "metrics_url": f"{capture}/metrics"}],
        },
        "canaries": [{"id": "c0", "prompt": "ok", "max_tokens": 3}],
        "background": {"prompt_words": [8, 12], "max_tokens": [4, 8]},
        "sweep": {"levels": [1], "canaries_per_level": 1, "warmup": 0, "baseline": 1, "settle_timeout_s": 0.5},
    }
    over: dict[str, Any] = {"endpoint": {"base_url": capture, "kind": "completions", "api_key_env": SECRET_ENV}}
    if launcher is not None:
        scenario["launcher"] = launcher
        over["engine"] = {"kind": launcher["kind"], "command": "recorded", "env": {}, "starts": 1}
    records = [rec([1, 2], phase="baseline"), rec([1, 2], level=1), rec([1, 3], level=1)]
    return write_run(tmp_path / "run", records, levels=[1], scenario=scenario, **over)


def reproducer(run: Path) -> Path:
    out = loadgen("repro", str(run), "--canary", "c0")
    assert out.returncode == 0, out.stderr
    return run / "repro-c0-3"


def replay(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(folder / "replay.sh"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, SECRET_ENV: SECRET, MINE_ENV: MINE, **env},
    )


def marking_launcher(marker: Path) -> dict[str, Any]:
    """A program of the folder author's choosing: leaves ``marker`` and never serves (its start fails in 2 s)."""
    return {
        "kind": "command",
        "command": f"touch {marker} && sleep 30 # {{port}}",
        "ready_timeout_s": 2,
        "require_approval": False,  # the folder's say: not heeded
    }


def shown_in(text: str, after: str, prefix: str) -> str:
    """The first line that is not empty after the one starting with ``after``, less ``prefix``."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(after))
    line = next(line for line in lines[at + 1 :] if line)
    assert line.startswith(prefix), line
    return line.removeprefix(prefix)


def test_a_replay_starts_the_folder_s_engine_only_once_that_exact_command_is_approved(
    tmp_path: Path, capture: str
) -> None:
    marker = tmp_path / "MARKER"
    folder = reproducer(hostile_run(tmp_path, capture, launcher=marking_launcher(marker)))
    out = tmp_path / "replays"

    refused = replay(folder, "--out", str(out))
    assert refused.returncode == 2, refused.stderr
    assert not marker.exists(), "the folder's command ran without approval"
    shown = shown_in(refused.stderr, "loadgen run: error: [launcher] require_approval:", "")
    assert str(marker) in shown and shown.startswith("/bin/sh -c ")
    # the README, replay.sh and the refusal show one command, byte for byte
    readme = (folder / "README.md").read_text()
    script = (folder / "replay.sh").read_text()
    assert shown_in(readme, "Without a URL it starts the engine the run started", "    ") == shown
    assert shown_in(script, "# Without BASE_URL it starts the engine the run started", "#   ") == shown
    digest = re.search(rf"{APPROVE}=([0-9a-f]{{64}}) ", refused.stderr)
    assert digest is not None and digest.group(1) == approval_digest(shown)

    # an approval of another command (the plain embedded engine's; any other line) approves nothing here
    for other in (command_to_approve(LauncherSpec(kind="embedded")), shown + " ", "yes"):
        again = replay(folder, "--out", str(out), **{APPROVE: approval_digest(other)})
        assert again.returncode == 2 and "holds another value" in again.stderr, again.stderr
        assert not marker.exists()
    again = replay(folder, "--out", str(out), **{APPROVE: "yes"})
    assert again.returncode == 2 and not marker.exists()
    assert not list(out.glob("*/manifest.json")), "a run folder was made for a refused replay"

    # approved: that command starts (and, never serving, fails its start)
    started = replay(folder, "--out", str(out), **{APPROVE: digest.group(1)})
    assert marker.exists(), started.stderr
    assert started.returncode == 2 and "require_approval" not in started.stderr


@pytest.mark.parametrize("named", [False, True], ids=["no-key-named", "key-named"])
def test_a_replay_sends_nothing_to_the_folder_s_hosts_and_only_the_key_named_on_its_command_line(
    tmp_path: Path, capture: str, given: str, named: bool
) -> None:
    folder = reproducer(hostile_run(tmp_path, capture))
    for name in ("replay.toml", "replay.sh", "README.md"):
        text = (folder / name).read_text()
        assert SECRET_ENV not in text and capture not in text.replace(f"on `{capture}`", ""), name
    before_capture, before_given = seen(capture), seen(given)

    key = ["--api-key-env", MINE_ENV] if named else []
    ran = replay(folder, given, *key, "--out", str(tmp_path / "replays"), "--quiet")
    assert ran.returncode == 0, ran.stderr

    assert seen(capture) == before_capture, "the folder's endpoint or servers were contacted"
    after = seen(given)["authorization"]
    sent = {k for k, n in after.items() if n - before_given["authorization"].get(k, 0) > 0}
    assert sent == ({f"Bearer {MINE}"} if named else {""}), sent
    run_dir = Path(ran.stdout.strip().splitlines()[-1])
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes() and MINE.encode() not in path.read_bytes(), path
