"""Against an endpoint whose answer depends on how many requests it serves at arrival, no canary is mislabelled.

A real ``loadgen run`` sweep (real Locust, real HTTP) against ``concurrency_server.py``: the server logs
how many requests it was serving when each canary arrived, and its answer encodes that count. For each
logprob dialect, streamed and not: every canary shared the server with its level of other requests (streamed:
at least its level, the level a floor; not streamed: at most its level and at least one fewer, the level a
ceiling, docs/design.md "The level's band"), its recorded completion is the one the rule gives for what the
server saw, each level's unique count and earliest divergence in ``report.json`` are what the rule implies,
and the report's measured co-residency (the server's ``/metrics``, scraped over each canary's life) agrees.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from collectors.jsonl import read_jsonl
from loadgen.core.band import CEILING, FLOOR, level_band
from loadgen.core.record import CanaryRecord
from loadgen.core.request import RunRequest
from loadgen.studies.run import run
from tests.loadgen.concurrency_server import token_ids  # the server's rule: n requests at arrival give these ids
from tests.loadgen.serve_app import script_server

SERVER = Path(__file__).parents[1] / "concurrency_server.py"
MAX_TOKENS = 16
LEVELS = [0, 2, 5]
CANARY_PROMPT = "canary under a held level"


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """The server started for real with the dialect the test asks for: (base URL, dialect)."""
    with script_server(SERVER, "--dialect", request.param, "--token-s", "0.01") as url:
        yield url, request.param


def scenario(
    tmp_path: Path, *, chat: bool, stream: bool, levels: list[int] = LEVELS, canaries: int = 4, pace_s: float = 0.0
) -> Path:
    canary = f'messages = [{{ role = "user", content = "{CANARY_PROMPT}" }}]' if chat else f'prompt = "{CANARY_PROMPT}"'
    text = f"""
name = "held"
[endpoint]
kind = "{"chat" if chat else "completions"}"
[[canaries]]
id = "c"
{canary}
max_tokens = {MAX_TOKENS}
seed = 0
logprobs = true
top_logprobs = 2
stream = {str(stream).lower()}
[background]
seed = 3
prompt_words = [4, 8]
max_tokens = [30, 50]
stream = {str(stream).lower()}
handover_s = 0.25  # slack for a loaded 2-core machine (CI: 4 test workers), where the generator may wake late
[sweep]
levels = {levels}
canaries_per_level = {canaries}
canary_pace_s = {pace_s}
warmup = 0
baseline = 2
"""
    path = tmp_path / "held.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("server", ["legacy", "chat", "llamacpp"], indirect=True)
def test_every_canary_shared_at_least_its_level(server: tuple[str, str], stream: bool, tmp_path: Path) -> None:
    url, dialect = server
    result = run(
        RunRequest(scenario(tmp_path, chat=dialect == "chat", stream=stream), host=url, out_dir=tmp_path / "runs")
    )
    assert result.status == "finished"
    records = sorted(
        (CanaryRecord.from_dict(r) for r in read_jsonl(result.run_dir / "canaries.jsonl").rows),
        key=lambda r: r.sent_at,
    )
    with urllib.request.urlopen(f"{url}/_arrivals") as resp:
        seen = [a for a in orjson.loads(resp.read()) if a["prompt"].startswith(CANARY_PROMPT[:20])]
    assert len(seen) == len(records) == 2 + 4 * len(LEVELS)  # canaries go one at a time, in order

    for record, arrival in zip(records, seen, strict=True):
        others = arrival["n"] - 1
        assert record.status == "ok" and record.held_at_send is True
        if stream:  # a floor: never fewer than the level
            assert others >= record.level, f"level {record.level} canary arrived with {others} other requests"
        else:  # a ceiling: never more, and fewer only by a slot between its end and its next send
            assert record.level - 1 <= others <= record.level, f"level {record.level} canary: {others} others"
        assert record.level_bound == (None if not record.level else FLOOR if stream else CEILING)
        assert record.token_ids == token_ids(arrival["n"], MAX_TOKENS)  # recorded as the server answered it

    report = orjson.loads((result.run_dir / "report.json").read_bytes())
    for level in report["levels"]:
        sent = [
            a["n"] for r, a in zip(records, seen, strict=True) if r.phase == "sweep" and r.level == level["concurrency"]
        ]
        assert level["unique_completions"] == len(set(sent))
        diverged = [n - 1 for n in sent if n >= 2]
        assert level["earliest_divergence"] == (min(diverged) if diverged else None)
        # and the report's own measurement, from the server's /metrics over each canary's life, agrees
        co, promised = level["co_residency"], level["concurrency"]
        assert co["source"] == "metrics"
        if stream:
            assert co["not_held"] == 0 and co["min"] >= promised
        else:  # a scrape may catch a slot between two requests, never a slot doubled
            assert co["max"] <= promised and co["median"] >= level_band(promised)[0]
    witness = report["run"]["witness"]  # the report says which record it measured with, and how fresh it was
    assert witness["source"] == "metrics" and witness["scrape_interval_s"] == 0.05
    # a floor's hand-overs move the gauge while canaries run; a ceiling's level is steady (its gaps last a few ms)
    assert witness["gauge_changes"] > 0 if stream else witness["gauge_changes"] >= 0


def _background_spans(run_dir: Path, first: float, last: float) -> list[tuple[float, float]]:
    """The client's own background requests of the sweep, as (sent, ended) on its clock."""
    return [
        (b["sent_at"], b["sent_at"] + b["latency_s"])
        for b in read_jsonl(run_dir / "background.jsonl").rows
        if b["status"] == "ok" and b["phase"] == "sweep" and first <= b["sent_at"] + b["latency_s"] <= last
    ]


def _one_level(
    server: tuple[str, str], tmp_path: Path, *, stream: bool, level: int, canaries: int, pace_s: float
) -> tuple[Path, float, float]:
    """A finished run of one level against the server: its folder, and the sweep's first send and last end."""
    result = run(
        RunRequest(
            scenario(tmp_path, chat=False, stream=stream, levels=[level], canaries=canaries, pace_s=pace_s),
            host=server[0],
            out_dir=tmp_path / "runs",
        )
    )
    assert result.status == "finished"
    sweep = [r for r in read_jsonl(result.run_dir / "canaries.jsonl").rows if r["phase"] == "sweep"]
    return result.run_dir, min(r["sent_at"] for r in sweep), max(r["sent_at"] + r["latency_s"] for r in sweep)


@pytest.mark.parametrize("server", ["legacy"], indirect=True)
def test_every_hand_over_starts_before_its_request_ends(server: tuple[str, str], tmp_path: Path) -> None:
    """While a level runs, each streamed background request that ends has its successor already in flight: the
    client's own records show ``level`` other background requests in flight at every end. A slot that
    starts its successor only at the end leaves the engine one request short until it is admitted.
    Level 1: one slot, so no other slot's overlap can hide an empty one."""
    level = 1
    run_dir, first, last = _one_level(server, tmp_path, stream=True, level=level, canaries=10, pace_s=0.5)
    spans = _background_spans(run_dir, 0.0, float("inf"))
    ends = [end for _, end in spans if first <= end <= last]
    assert len(ends) >= 12, f"too few background requests ended while the level ran: {len(ends)}"
    short = [end for end in ends if sum(sent < end < stop for sent, stop in spans) < level]
    # on a loaded machine a late wake-up can still miss one or two (CI once saw 2 of 27 while a 2-worker suite ran
    # beside it); a slot that hands over at the end misses half
    assert len(short) <= max(1, len(ends) // 10), (
        f"{len(short)} of {len(ends)} ends had fewer than {level} other requests in flight"
    )


@pytest.mark.parametrize("server", ["legacy"], indirect=True)
def test_a_non_streamed_slot_sends_its_next_request_once_the_last_has_ended(
    server: tuple[str, str], tmp_path: Path
) -> None:
    """Non-streamed background shows no progress, so the level is a ceiling (docs/design.md, "The level's band"):
    by the client's own records, no background request is sent while ``level`` others are in flight, and a slot
    is empty only for the moment between an end and the next send. This test once asserted the opposite, a
    hand-over "on time" before each end; against an endpoint whose answer time does not grow with its length
    that hand-over doubled the level (``test_level_band_e2e.py``, the ceiling classes)."""
    level = 2
    run_dir, first, last = _one_level(server, tmp_path, stream=False, level=level, canaries=8, pace_s=0.3)
    spans = _background_spans(run_dir, first, last)
    assert len(spans) >= 12, f"too few background requests ended while the level ran: {len(spans)}"
    crowded = [sent for sent, _ in spans if sum(s < sent < stop for s, stop in spans) >= level]
    assert crowded == [], f"{len(crowded)} of {len(spans)} sends found {level} others already in flight"
    # each end is followed by a send soon: the slot is empty for a moment, not for a request's time
    sends = sorted(sent for sent, _ in _background_spans(run_dir, 0.0, float("inf")))
    gaps = sorted(min((s - end for s in sends if s >= end), default=float("inf")) for _, end in spans)
    assert gaps[len(gaps) // 2] < 0.05, f"median gap between an end and the next send {gaps[len(gaps) // 2]:.3f} s"
