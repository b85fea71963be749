"""A stream whose first tokens come in one piece does not make its slot hand over early and double the level.

A real ``loadgen run`` (real Locust, real HTTP) against ``onset_server.py --first-piece N``: every stream's
first N token events arrive together, as from an engine that streams at an interval, or as a generator
that woke late reads them. A pace taken over those N tokens looks N times too fast, so a slot would start
its successor near the start of its request and run two for most of its life. The server counts what it
serves over each canary's life: at level L the median must be L + 1 (the level, and the canary), as on a
server that streams token by token; the design's floor (never fewer) holds too.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from serve_app import script_server

from collectors.jsonl import read_jsonl
from loadgen.studies.run import run

SERVER = Path(__file__).parents[1] / "onset_server.py"
PROMPT = "canary beside pieced streams"
LEVELS = [1, 3]


@pytest.fixture(params=[1, 24], ids=["token-by-token", "first-24-in-one-piece"])
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    with script_server(SERVER, "--diverge-above", "99", "--first-piece", str(request.param)) as url:
        yield url


def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "pieces.toml"
    path.write_text(f"""
name = "pieces"
[endpoint]
kind = "completions"
[[canaries]]
id = "c"
prompt = "{PROMPT}"
max_tokens = 40
seed = 0
stream = true
[background]
seed = 3
prompt_words = [4, 8]
max_tokens = [80, 120]
stream = true
handover_s = 0.05
[sweep]
levels = {LEVELS}
canaries_per_level = 3
warmup = 0
baseline = 1
""")
    return path


def test_each_canary_shares_the_server_with_its_level_for_most_of_its_life(server: str, tmp_path: Path) -> None:
    result = run(scenario(tmp_path), host=server, out_dir=tmp_path / "runs")
    assert result.status == "finished"
    records = sorted(read_jsonl(result.run_dir / "canaries.jsonl").rows, key=lambda r: r["sent_at"])
    with urllib.request.urlopen(f"{server}/_seen") as resp:
        seen = [s for s in orjson.loads(resp.read()) if s["prompt"] == PROMPT]
    assert len(seen) == len(records) == 1 + 3 * len(LEVELS)
    sweep = [(r["level"], s) for r, s in zip(records, seen, strict=True) if r["phase"] == "sweep"]
    assert all(s["fewest"] >= level + 1 for level, s in sweep), sweep  # the floor
    assert [s["median"] for _, s in sweep] == [level + 1 for level, _ in sweep], sweep
