import sys
import time
from pathlib import Path

import pytest

from loadgen.core.errors import EngineArgsError, EngineError
from loadgen.launchers import process as launch


def test_engine_starts_serves_and_stops(tmp_path: Path) -> None:
    import urllib.request

    with (
        launch.start_embedded([], log_path=tmp_path / "engine.log") as engine,
        urllib.request.urlopen(engine.url + "/health", timeout=5) as resp,
    ):
        assert resp.status == 200
    assert engine.process.poll() is not None


def test_engine_that_dies_is_an_error_with_command_and_log_tail(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(EngineError) as info:  # parsed, then refused by the engine's own check: exit code 1
        launch.start_embedded(["--max-num-seqs=0"], log_path=tmp_path / "engine.log", ready_timeout_s=30)
    msg = str(info.value)
    assert not isinstance(info.value, EngineArgsError)
    assert "--max-num-seqs=0" in msg and "exit code 1" in msg and "log tail" in msg and "must be positive" in msg
    assert time.monotonic() - t0 < 25


def test_arguments_the_engine_refuses_are_its_parser_line_and_the_command(tmp_path: Path) -> None:
    with pytest.raises(EngineArgsError) as info:
        launch.start_embedded(["--no-such-flag"], log_path=tmp_path / "engine.log", ready_timeout_s=30)
    msg = str(info.value)
    assert msg.startswith("the engine refused its arguments: loadgen serve: error: unrecognized arguments: --no-such")
    assert "\n" not in msg and "usage:" not in msg and msg.endswith("--port 0 --no-such-flag)")


def test_engine_that_never_gets_ready_times_out(tmp_path: Path) -> None:
    sleeper = [sys.executable, "-c", "import time; print('starting', flush=True); time.sleep(30)"]
    t0 = time.monotonic()
    with pytest.raises(EngineError, match=r"within 0\.5 s") as info:
        launch.start_process(sleeper, log_path=tmp_path / "e.log", ready_timeout_s=0.5)
    assert "starting" in str(info.value)  # the log tail carries what it printed
    assert time.monotonic() - t0 < 5
