"""Shared fixtures: the fault server and the embedded engine started for real."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.loadgen.serve_app import script_server

FAULT_SERVER = Path(__file__).with_name("fault_server.py")


@pytest.fixture(scope="session")
def fault_server() -> Iterator[str]:
    """A real local OpenAI-style server that misbehaves on request (see fault_server.py)."""
    with script_server(FAULT_SERVER) as url:
        yield url


@pytest.fixture(scope="session")
def engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The embedded engine, started for real as a subprocess on a free port."""
    from loadgen.launchers.process import start_embedded

    log = tmp_path_factory.mktemp("engine") / "engine.log"
    with start_embedded([], log_path=log) as engine:
        yield engine.url


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture
def free_port() -> int:
    """A port nothing listens on right now."""
    return _free_port()


@pytest.fixture
def wait_http() -> Callable[[str], None]:
    """Wait until a URL answers (any status), or raise after 30 s."""
    return _wait_http


@pytest.fixture
def quickstart_short_settle(tmp_path: Path) -> Path:
    """``scenarios/quickstart.toml`` waiting 0.5 s, not 10, for a level to be held (``settle_timeout_s``): the
    fault server's background ends at once, so a level above 0 is never held there and every stage and
    canary would wait the whole timeout. For runs that assert nothing about held."""
    from scenarios import path_of

    path = tmp_path / "quickstart.toml"
    path.write_text(path_of("quickstart").read_text().replace("[sweep]\n", "[sweep]\nsettle_timeout_s = 0.5\n", 1))
    assert "settle_timeout_s = 0.5" in path.read_text()
    return path
