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
