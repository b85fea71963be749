"""Through the real CLI: a scenario whose requests cannot fit the endpoint's context is refused after the probe,
before any load, naming the limit (``loadgen.runs.context``).

The embedded engine here runs with its default context (512 tokens, stated as ``max_model_len`` in its
``/v1/models``): ``tm-burst``'s canary asks for 1,000 tokens of answer, ``mixed-lengths``'s background for prompts
of up to 1,500 words. Without ``--host`` each scenario starts its own engine with room for them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.runs.context import context_of
from tests.loadgen.cli import clikit


@pytest.mark.parametrize(
    ("scenario", "asked"),
    [
        ("tm-burst", "canary 'feynman' asks for at least 1005 (5 prompt words + max_tokens 1000)"),
        ("mixed-lengths", "the largest background request asks for at least 2012 (1500 prompt words + max_tokens 512)"),
    ],
)
def test_a_request_longer_than_the_context_is_refused_before_any_load(
    engine_url: str, tmp_path: Path, scenario: str, asked: str
) -> None:
    out = tmp_path / "runs"
    done = clikit.loadgen_process("run", scenario, "--host", engine_url, "--out", str(out), "--levels", "0,2")
    assert done.returncode == 2, done.stdout + done.stderr
    *progress, line = done.stderr.splitlines()  # the progress lines (engine, probe), then the error's one line
    assert all(not p.startswith("loadgen run:") for p in progress)
    assert line.startswith(f"loadgen run: error: {engine_url}: the endpoint serves at most 512 tokens per request")
    assert asked in line and "--max-model-len" in line
    assert done.stdout == "" and not (out.exists() and any(out.iterdir()))  # no run folder: no load was sent


def test_the_context_is_read_for_the_model_served_and_only_as_a_whole_number() -> None:
    body = {"data": [{"id": "other", "max_model_len": 64}, {"id": "m", "max_model_len": 4096}]}
    assert context_of(body, "m") == 4096 and context_of(body, "other") == 64
    assert context_of(body, "absent") is None
    for stated in (None, "4096", 40.5, True, 0, -1):
        assert context_of({"data": [{"id": "m", "max_model_len": stated}]}, "m") is None
    assert context_of({"object": "list"}, "m") is None and context_of([], "m") is None
