"""A stream whose first tokens come in one piece does not make its slot hand over early and double the level.

A real ``loadgen run`` (real Locust, real HTTP) against ``onset_server.py --first-piece N``: every stream's
first N token events arrive together, as from an engine that streams at an interval, or as a generator
that woke late reads them. A pace taken over those N tokens looks N times too fast, so a slot would start
its successor near the start of its request and run two for most of its life (with 24-token pieces, for
every background request up to 145 tokens). The server counts what it serves over each canary's life: L + 1
for most of it (the level, and the canary: the floor, the successor being due a piece before the end, as the end
too may be seen a piece at a time), and never fewer than L (a reader starved of CPU can start a successor late).
A successor's lead of a piece (24 of 120 to 160 tokens) overlaps about a fifth of each slot's time, so the median
is L + 1 at level 1, as on a server that streams token by token, and at most one more at level 2, where two slots
overlap; doubled slots put it at L + 2 and L + 3.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from collectors.jsonl import read_jsonl
from loadgen.core.request import RunRequest
from loadgen.studies.run import run
from tests.loadgen.serve_app import script_server

SERVER = Path(__file__).parents[1] / "onset_server.py"
PROMPT = "canary beside pieced streams"
LEVELS = [1, 2]


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
max_tokens = [120, 160]
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
    result = run(RunRequest(scenario(tmp_path), host=server, out_dir=tmp_path / "runs"))
    assert result.status == "finished"
    records = sorted(read_jsonl(result.run_dir / "canaries.jsonl").rows, key=lambda r: r["sent_at"])
    with urllib.request.urlopen(f"{server}/_seen") as resp:
        seen = [s for s in orjson.loads(resp.read()) if s["prompt"] == PROMPT]
    assert len(seen) == len(records) == 1 + 3 * len(LEVELS)
    sweep = [(r["level"], s) for r, s in zip(records, seen, strict=True) if r["phase"] == "sweep"]
    shown = [(level, s["fewest"], s["median"], s["most"]) for level, s in sweep]
    # the floor: L + 1 for most of the canary's life; a moment with one fewer is a successor its slot's reader,
    # starved of CPU, started late (docs/design.md, "The level's band"), never two slots empty at once
    assert all(s["median"] >= level + 1 and s["fewest"] >= level for level, s in sweep), shown
    assert all(s["median"] == 2 for level, s in sweep if level == 1), shown
    assert all(s["median"] <= 4 for level, s in sweep if level == 2), shown
