"""Launchers against real processes: the embedded engine, a shell command, and a stand-in engine binary
(``fake_engine.py``: a real HTTP server that answers 503 while "loading", then 200)."""

from __future__ import annotations

import json
import stat
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from loadgen.core.errors import EngineError
from loadgen.core.scenario import LauncherSpec
from loadgen.launchers.launcher import Launcher

FAKE = Path(__file__).with_name("fake_engine.py")
FAKE_CMD = f"{sys.executable} {FAKE} --port {{port}}"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie nobody reaped has stopped running


def _status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return int(resp.status)


def _wrapper(tmp_path: Path) -> str:
    """An executable standing in for ``vllm`` / ``llama-server`` / sglang's Python: runs fake_engine.py."""
    exe = tmp_path / "engine-bin"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_health_wait_rides_out_503_then_serves_and_stop_ends_it(tmp_path: Path) -> None:
    spec = LauncherSpec(kind="command", command=FAKE_CMD, env={"FAKE_LOADING_S": "1.0"}, ready_timeout_s=20)
    log = tmp_path / "engine.log"
    t0 = time.monotonic()
    with Launcher(spec) as launcher:
        engine = launcher.start(log)
        assert time.monotonic() - t0 >= 1.0  # it waited through the 503s
        assert _status(engine.url + "/health") == 200
        pid = engine.process.pid
    assert not _alive(pid)
    text = log.read_text()
    assert "--- loadgen: start 1" in text and "loading for 1 s" in text and '"GET /health HTTP/1.1" 503' in text


def test_vllm_kind_passes_port_flags_and_env_to_the_engine(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    spec = LauncherSpec(
        kind="vllm",
        model="my-model",
        executable=_wrapper(tmp_path),
        ready_timeout_s=20,
        args=["--no-enable-prefix-caching"],
        env={"VLLM_BATCH_INVARIANT": "1", "FAKE_RECORD": str(record)},
    )
    with Launcher(spec) as launcher:
        engine = launcher.start(tmp_path / "engine.log")
        port = engine.url.rsplit(":", 1)[1]
        seen = json.loads(record.read_text())
    assert seen["argv"] == ["serve", "my-model", "--host", "127.0.0.1", "--port", port, "--no-enable-prefix-caching"]
    assert seen["env"]["VLLM_BATCH_INVARIANT"] == "1" and seen["env"]["VLLM_SERVER_DEV_MODE"] == "1"
    assert isinstance(command := launcher.describe()["command"], str) and command.startswith("FAKE_RECORD=")


def test_stopping_an_engine_stops_the_workers_it_spawned(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    spec = LauncherSpec(
        kind="llamacpp",
        model="x.gguf",
        executable=_wrapper(tmp_path),
        ready_timeout_s=20,
        env={"FAKE_CHILD": "1", "FAKE_RECORD": str(record)},
    )
    launcher = Launcher(spec)
    launcher.start(tmp_path / "engine.log")
    child = int(json.loads(record.read_text())["child_pid"])
    assert _alive(child)
    launcher.stop()
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_engine_that_stays_unhealthy_is_an_error_with_status_command_and_log(tmp_path: Path) -> None:
    spec = LauncherSpec(kind="command", command=FAKE_CMD, env={"FAKE_LOADING_S": "1000"}, ready_timeout_s=1.5)
    launcher = Launcher(spec)
    t0 = time.monotonic()
    with pytest.raises(EngineError) as info:
        launcher.start(tmp_path / "engine.log")
    msg = str(info.value)
    assert "within 1.5 s" in msg and "last health answer: HTTP 503" in msg
    assert str(FAKE) in msg and "loading for 1000 s" in msg  # the command, and the log tail
    assert time.monotonic() - t0 < 10 and launcher.engine is None


def test_engine_that_exits_is_an_error_with_its_exit_code_at_once(tmp_path: Path) -> None:
    spec = LauncherSpec(kind="command", command="echo cannot load weights; exit 3", port=1, ready_timeout_s=60)
    t0 = time.monotonic()
    with pytest.raises(EngineError, match="exited with code 3") as info:
        Launcher(spec).start(tmp_path / "engine.log")
    assert "cannot load weights" in str(info.value) and time.monotonic() - t0 < 10


def test_missing_engine_program_is_an_error_naming_the_command(tmp_path: Path) -> None:
    spec = LauncherSpec(kind="llamacpp", model="m.gguf", executable=str(tmp_path / "no-such-llama-server"))
    with pytest.raises(EngineError, match="cannot start the engine") as info:
        Launcher(spec).start(tmp_path / "engine.log")
    assert "no-such-llama-server -m m.gguf" in str(info.value)


def test_embedded_restart_is_a_fresh_process_logged_to_one_file(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    with Launcher(LauncherSpec(args=["--batch-invariant"])) as launcher:
        first = launcher.start(log)
        assert _status(first.url + "/health") == 200
        second = launcher.restart()
        assert second.process.pid != first.process.pid and not _alive(first.process.pid)
        assert _status(second.url + "/health") == 200
        assert launcher.starts == 2
        with pytest.raises(EngineError, match="already running"):
            launcher.start(log)
    assert not _alive(second.process.pid)
    text = log.read_text()
    assert text.count("--- loadgen: start") == 2 and text.count("READY http://127.0.0.1:") == 2
    assert "--batch-invariant" in text


def test_scenario_env_reaches_the_embedded_engine(tmp_path: Path) -> None:
    # the engine's own __main__ sets OPENBLAS_NUM_THREADS only by default: the scenario's value wins
    with Launcher(LauncherSpec(env={"OPENBLAS_NUM_THREADS": "2"})) as launcher:
        engine = launcher.start(tmp_path / "engine.log")
        environ = Path(f"/proc/{engine.process.pid}/environ").read_bytes().split(b"\0")
    assert b"OPENBLAS_NUM_THREADS=2" in environ
