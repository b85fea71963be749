"""256 streamed background requests on one core: the level is held, or the report says it was not and why.

Issue 19's "done when": against a server streaming 200 tokens a second per request, a sweep to 256
streamed background users with the tool on one core (the ``loadgen run`` process and its Locust process
pinned to one CPU; the server free to use the others). Either the level held (the server's own running
count, scraped from its ``/metrics`` over each canary's life, never fell below 256 others) or the report
marks the canaries not held and names the level generator-bound with the advice to add processes.
What must never happen is what was seen before: the server serving far fewer requests than the level
while the report is silent.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from serve_app import script_server

SERVER = Path(__file__).parents[1] / "concurrency_server.py"
LEVEL = 256


@pytest.fixture
def server() -> Iterator[str]:
    with script_server(SERVER, "--dialect", "legacy", "--token-s", "0.005") as url:  # 200 tokens/s per request
        yield url


def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "one-core.toml"
    path.write_text(
        f"""
name = "one-core"
[endpoint]
kind = "completions"
[[canaries]]
id = "c"
prompt = "a canary beside 256 streams"
max_tokens = 32
seed = 0
[background]
seed = 1
prompt_words = [4, 8]
max_tokens = [300, 400]
stream = true
handover_s = 0.2
[sweep]
levels = [0, {LEVEL}]
canaries_per_level = 3
warmup = 0
baseline = 1
settle_timeout_s = 10
"""
    )
    return path


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pinning to one core needs sched_setaffinity")
def test_256_streams_on_one_core_are_held_or_reported_bound(server: str, tmp_path: Path) -> None:
    core = min(os.sched_getaffinity(0))
    args = ["run", str(scenario(tmp_path)), "--host", server, "--out", str(tmp_path / "runs"), "--quiet"]
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen", *args],
        preexec_fn=lambda: os.sched_setaffinity(0, {core}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    report = orjson.loads((run_dir / "report.json").read_bytes())
    (level,) = [lv for lv in report["levels"] if lv["concurrency"] == LEVEL]
    co = level["co_residency"]
    assert co["source"] == "metrics" and co["unmeasured"] == 0
    bound = report["client_load"]["generator_bound_levels"]
    if co["not_held"] == 0:
        assert co["held"] == level["canaries"] and co["min"] >= LEVEL
    else:
        assert LEVEL in bound, f"level {LEVEL} not held ({co}) and not reported generator-bound ({bound})"
        notice = next(n for n in report["run"]["notices"] if n.startswith("Generator-bound at level"))
        assert str(LEVEL) in notice and "add --processes" in notice
        assert any("fewer other requests than the level" in n for n in report["run"]["notices"])
