"""Start-up shared by the test servers run as scripts (fault_server.py, concurrency_server.py,
onset_server.py, timing_server.py): serve an aiohttp app on a free local port, announce it with ``READY <url>``
on stdout (what the tests wait for), and run until stopped; and ``script_server``, the tests' side: start
such a script for real and yield its URL.

The servers import their siblings as ``tests.loadgen....``, so one runs as a module from the repository root
(``script_command``, ``cwd=REPO``), not by its path."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiohttp import web

REPO = Path(__file__).resolve().parents[2]


def script_command(script: Path, *args: str) -> list[str]:
    """The command line that runs ``script`` (a module under tests/) with ``args``: ``python -m tests.x.y``, to be
    started with ``cwd=REPO``."""
    module = ".".join(script.resolve().relative_to(REPO).with_suffix("").parts)
    return [sys.executable, "-m", module, *args]


async def serve(app: web.Application) -> None:
    """Serve ``app`` on 127.0.0.1 and a free port, print ``READY http://127.0.0.1:PORT``, wait forever."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"READY http://127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


def run(main: Callable[[], Awaitable[None]]) -> None:
    """Run the script's ``main`` until SIGINT/SIGTERM ends the process; Ctrl-C exits 0."""
    try:
        asyncio.run(main())  # type: ignore[arg-type]
    except KeyboardInterrupt:
        sys.exit(0)


@contextmanager
def script_server(script: Path, *args: str) -> Iterator[str]:
    """Run ``script`` (one of the servers above, or another that prints the same READY line, such as
    engine/pd_recorder.py) with ``args`` as a real process; yield its base URL."""
    proc = subprocess.Popen(script_command(script, *args), cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY "), line
        yield line.split()[1]
    finally:
        proc.terminate()
        proc.wait(10)


def seen(url: str) -> dict[str, Any]:
    """What a test server that keeps a record of its requests (``GET /_seen``) has seen so far."""
    with urllib.request.urlopen(f"{url}/_seen", timeout=5) as resp:
        data: dict[str, Any] = json.loads(resp.read())
    return data
