"""Where the background's progress cannot be seen, a level is a ceiling: never more than ``level`` others.

A real ``loadgen run`` (real Locust, real HTTP) against ``level_server.py``, whose every answer comes 0.2 s
after its request whatever its length: streamed answers in one piece (as through a buffering proxy or from a
hosted API that streams in large chunks), or non-streamed. Nothing tells the client how far a request has
got, so a slot sends its next request only once the last one has ended (docs/design.md, "The level's band").
The server counts the other requests in flight over each canary's life: at levels 3 and 12 never more than
the level. Handing over "on time", at the fastest recent seconds-per-token, a short request handed over as
soon as it was sent and the slot ran two for most of its life: up to twice the level.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from serve_app import script_server

from collectors.jsonl import read_jsonl
from loadgen.core.band import CEILING, level_band
from loadgen.studies.run import run

SERVER = Path(__file__).parents[1] / "level_server.py"
PROMPT = "canary beside answers of a fixed delay"
LEVELS = [3, 12]
CANARIES = 4


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with script_server(SERVER, "--delay-s", "0.2") as url:
        yield url


def scenario(tmp_path: Path, *, stream: bool) -> Path:
    path = tmp_path / "ceiling.toml"
    path.write_text(f"""
name = "ceiling"
[endpoint]
kind = "completions"
[[canaries]]
id = "c"
prompt = "{PROMPT}"
max_tokens = 8
seed = 0
logprobs = true
stream = false
[background]
seed = 3
prompt_words = [4, 8]
max_tokens = [4, 64]
stream = {str(stream).lower()}
[sweep]
levels = {LEVELS}
canaries_per_level = {CANARIES}
warmup = 0
baseline = 1
""")
    return path


@pytest.mark.parametrize("stream", [True, False], ids=["streamed-in-one-piece", "not-streamed"])
def test_no_canary_shares_the_server_with_more_than_its_level(server: str, stream: bool, tmp_path: Path) -> None:
    result = run(scenario(tmp_path, stream=stream), host=server, out_dir=tmp_path / "runs")
    assert result.status == "finished"
    records = sorted(read_jsonl(result.run_dir / "canaries.jsonl").rows, key=lambda r: r["sent_at"])
    with urllib.request.urlopen(f"{server}/_seen") as resp:
        seen = [s for s in orjson.loads(resp.read()) if s["prompt"] == PROMPT][-len(records) :]
    assert len(records) == 1 + CANARIES * len(LEVELS)
    sweep = [(r, s) for r, s in zip(records, seen, strict=True) if r["phase"] == "sweep"]
    shown = [(r["level"], r["inflight_at_send"], s["at_arrival"], s["most"]) for r, s in sweep]
    # the ceiling: the server never served more than the level beside a canary, and the client never had more
    assert all(s["most"] <= r["level"] for r, s in sweep), shown
    assert all(r["inflight_at_send"] <= r["level"] for r, _ in sweep), shown
    assert all(r["level_bound"] == CEILING and r["held_at_send"] is True for r, _ in sweep), shown
    # and at the level, not below its band: a slot is empty only for the moment between an end and its next send
    assert all(s["most"] >= level_band(r["level"])[0] for r, s in sweep), shown
    assert all(r["level_bound"] is None for r, _ in zip(records, seen, strict=True) if r["phase"] == "baseline")
