from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

FAULT_SERVER = Path(__file__).with_name("fault_server.py")


@pytest.fixture(scope="session")
def fault_server() -> Iterator[str]:
    """A real local OpenAI-style server that misbehaves on request (see fault_server.py)."""
    proc = subprocess.Popen([sys.executable, str(FAULT_SERVER)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("READY "), line
    yield line.split()[1]
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="session")
def engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The embedded engine, started for real as a subprocess on a free port."""
    from loadgen.launch import start_embedded

    log = tmp_path_factory.mktemp("engine") / "engine.log"
    with start_embedded([], log_path=log) as engine:
        yield engine.url
