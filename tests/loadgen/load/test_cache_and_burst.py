"""Cache-controlled canaries and the burst stage, end to end against the embedded engine."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson

from collectors.jsonl import read_jsonl
from collectors.read.runfolder import load_run
from loadgen.core.request import RunRequest
from loadgen.studies.run import run
from reports.analysis.coresidency import join_engine

SCENARIO = """
name = "cache-burst"
[[canaries]]
id = "cold"
prompt = "The history of the old harbour town begins with a small group of fishermen who settled there"
max_tokens = 8
cache = "reset"
expect_cache = "miss"
[[canaries]]
id = "warm"
prompt = "The history of the old harbour town begins with a small group of fishermen who settled there"
max_tokens = 8
expect_cache = "hit"
[[canaries]]
id = "salted"
prompt = "The history of the old harbour town begins with a small group of fishermen who settled there"
max_tokens = 8
cache = "salt"
expect_cache = "hit"
[sweep]
levels = [0]
canaries_per_level = 3
warmup = 0
baseline = 1
burst = 5
"""


def test_cache_actions_and_burst(engine_url: str, tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO)
    result = run(RunRequest(scenario, host=engine_url, out_dir=tmp_path / "runs"))
    assert result.status == "finished"
    rows = read_jsonl(result.run_dir / "canaries.jsonl").rows
    assert Counter((r["canary_id"], r["level"]) for r in rows) == {
        (c, lvl): n for c in ("cold", "warm", "salted") for lvl, n in ((0, 4), (15, 5))
    }
    burst = [r for r in rows if r["level"] == 15]  # 5 copies of each of the 3 canaries at once
    assert max(r["inflight_at_send"] for r in burst) >= 10  # fired together, not one by one
    cold = [r for r in rows if r["canary_id"] == "cold"]
    assert all(r["cache_action"] == "reset" and r["cache_reset_status"] == 200 for r in cold)
    salted = [r for r in rows if r["canary_id"] == "salted"]
    assert len({r["request"]["cache_salt"] for r in salted}) == len(salted)
    report = orjson.loads((result.run_dir / "report.json").read_bytes())
    checks = report["scenario_checks"]["cache_expectations"]
    # sent one at a time, a reset just before is always a miss; inside the burst other copies may refill it
    assert all(r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0 for r in cold if r["level"] == 0)
    assert checks["cold"]["met"] >= 4 and checks["cold"]["canaries"] == 9
    # sequential warm canaries after a cold one hit the cache the cold one filled
    assert checks["warm"]["reported"] == checks["warm"]["canaries"] > 0
    assert checks["warm"]["met"] >= 1
    # a salted request is a guaranteed miss: expecting a hit must be flagged, not passed
    assert checks["salted"]["violated"] == checks["salted"]["canaries"]
    assert any("salted was meant to hit" in n for n in report["run"]["notices"])
    # the request bodies differ only by the salt: one distinct body per canary
    assert report["scenario_checks"]["distinct_request_bodies"]["salted"] == 1


BURST = """
name = "burst-co-residency"
[[canaries]]
id = "c"
prompt = "The history of the old harbour town begins with a small group of fishermen who settled there"
max_tokens = 32
[sweep]
levels = [0]
canaries_per_level = 1
warmup = 0
baseline = 1
burst = 24
"""


def test_a_burst_reports_the_batch_its_copies_shared(engine_url: str, tmp_path: Path) -> None:
    """24 copies at once: the engine ran them together, and both witnesses say so (not the 0 or 1 that a
    sample taken at send time, before the burst arrived, would give)."""
    scenario = tmp_path / "s.toml"
    scenario.write_text(BURST)
    result = run(RunRequest(scenario, host=engine_url, out_dir=tmp_path / "runs"))
    assert result.status == "finished"
    rows = [r for r in read_jsonl(result.run_dir / "canaries.jsonl").rows if r["level"] == 24]
    assert len(rows) == 24 and all(r["burst"] and r["held_at_send"] is None for r in rows)
    truth = sorted(sorted(r["engine_batch_sizes"])[len(r["engine_batch_sizes"]) // 2] - 1 for r in rows)
    assert truth[len(truth) // 2] >= 12  # the median copy shared most of its steps with at least half the others
    report = orjson.loads((result.run_dir / "report.json").read_bytes())
    [burst] = [lv for lv in report["levels"] if lv["concurrency"] == 24]
    co = burst["co_residency"]
    assert co["source"] == "engine_batch_sizes" and co["unmeasured"] == 0 and co["median"] >= 12
    run_data = load_run(result.run_dir)
    scraped = join_engine(run_data.canaries.frame, run_data.engine_t, run_data.engine_running)
    # the scraped gauge saw the burst within each copy's life too; its median is not asserted: the engine
    # admits a burst over several steps (seen here: 9 of the 24 for 0.55 s of a 1.03 s life), so the
    # median is a fact about the engine's speed on the machine, not about the join
    maxima = scraped[scraped["level"] == 24]["engine_others_max"].dropna()
    assert len(maxima) >= 12 and maxima.median() >= 12


BURSTS = """
name = "burst-cache"
[[canaries]]
id = "c"
prompt = "The history of the old harbour town begins with a small group of fishermen who settled there"
max_tokens = 8
[background]
max_tokens = [16, 32]
[sweep]
levels = [0, 2]
canaries_per_level = 1
warmup = 0
baseline = 1
burst = [3, 4]
burst_cache = "{cache}"
"""


def _burst_rows(engine_url: str, tmp_path: Path, cache: str) -> list[dict[str, object]]:
    scenario = tmp_path / f"{cache}.toml"
    scenario.write_text(BURSTS.format(cache=cache))
    result = run(RunRequest(scenario, host=engine_url, out_dir=tmp_path / cache))
    assert result.status == "finished"
    return [r for r in read_jsonl(result.run_dir / "canaries.jsonl").rows if r["burst"]]


def test_each_burst_size_is_a_stage_and_a_reset_before_it_makes_the_copies_prefill_again(
    engine_url: str, tmp_path: Path
) -> None:
    """``burst = [3, 4]`` fires two bursts; with ``burst_cache = "reset"`` the cache is dropped before each (once
    the level before has drained), so a copy of every burst prefills the prompt afresh; with "keep" every copy
    finds it cached from the stages before."""
    reset = _burst_rows(engine_url, tmp_path, "reset")
    assert Counter(r["level"] for r in reset) == {3: 3, 4: 4}
    assert all(r["cache_action"] == "reset" and r["cache_reset_ok"] and r["cache_reset_status"] == 200 for r in reset)
    for size in (3, 4):
        cached = [r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in reset if r["level"] == size]  # type: ignore[index]
        assert min(cached) == 0, cached
    keep = _burst_rows(engine_url, tmp_path, "keep")
    assert Counter(r["level"] for r in keep) == {3: 3, 4: 4}
    assert all(r["cache_action"] is None and r["cache_reset_status"] is None for r in keep)
    assert all(r["usage"]["prompt_tokens_details"]["cached_tokens"] > 0 for r in keep)  # type: ignore[index]


MIXED = """
name = "burst-mix"
[[canaries]]
id = "a"
prompt = "The history of the old harbour town begins with a small group of fishermen"
max_tokens = 4
[[canaries]]
id = "b"
prompt = "The history of the old harbour town begins with"
max_tokens = 4
[[canaries]]
id = "c"
prompt = "The history of the old harbour town"
max_tokens = 4
[background]
seed = 3
[sweep]
levels = [0]
canaries_per_level = 1
warmup = 0
baseline = 1
burst = [4]
burst_mix = "random"
"""


def test_a_random_burst_mix_fires_the_canaries_in_uneven_numbers(engine_url: str, tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(MIXED)
    result = run(RunRequest(scenario, host=engine_url, out_dir=tmp_path / "runs"))
    assert result.status == "finished"
    burst = [r for r in read_jsonl(result.run_dir / "canaries.jsonl").rows if r["burst"]]
    counts = Counter(r["canary_id"] for r in burst)
    assert sum(counts.values()) == 12 and all(r["level"] == 12 for r in burst)
    assert len(set(counts.values())) > 1 or len(counts) < 3, counts  # seed 3 draws an uneven mix
    report = orjson.loads((result.run_dir / "report.json").read_bytes())
    assert report["run"]["status"] == "finished"


ONE_REQUEST = """
name = "burst-one-request"
[[canaries]]
id = "long"
prompt = "The history of the old harbour town begins with a small group of fishermen who settled there long ago"
max_tokens = 6
[[canaries]]
id = "short"
prompt = "The history of the old harbour town begins with"
max_tokens = 6
[background]
seed = 5
[sweep]
levels = [0]
canaries_per_level = 1
warmup = 0
baseline = 1
burst = [3, 5]
burst_cache = "reset"
burst_mix = "random"
burst_send = "one-request"
"""


def test_a_burst_in_one_request_is_prefilled_as_one_batch_and_recorded_per_copy(
    engine_url: str, tmp_path: Path
) -> None:
    """``burst_send = "one-request"``: each burst is one request carrying every copy's prompt (as SGLang's
    test_deterministic sends), so the engine prefills them all in its first step, none finding another's
    prefix cached after the reset; each copy is still its own record, with its own answer."""
    scenario = tmp_path / "s.toml"
    scenario.write_text(ONE_REQUEST)
    result = run(RunRequest(scenario, host=engine_url, out_dir=tmp_path / "runs"))
    assert result.status == "finished"
    rows = read_jsonl(result.run_dir / "canaries.jsonl").rows
    burst = [r for r in rows if r["burst"]]
    assert Counter(r["level"] for r in burst) == {6: 6, 10: 10}
    alone = {r["canary_id"]: r["token_ids"] for r in rows if not r["burst"]}
    for level in (6, 10):
        copies = [r for r in burst if r["level"] == level]
        assert len({r["sent_at"] for r in copies}) == 1  # one request
        assert all(r["status"] == "ok" and r["cache_action"] == "reset" and r["cache_reset_ok"] for r in copies)
        assert all(r["engine_batch_sizes"][0] == level for r in copies)  # prefilled together, in one step
        assert all(r["usage"] is None for r in copies)  # completions usage is summed over the prompts
        assert all(r["request"]["prompt"] in ONE_REQUEST and r["stream"] is False for r in copies)
        assert all(len(r["token_ids"]) == len(alone[r["canary_id"]]) == 6 for r in copies)
    report = orjson.loads((result.run_dir / "report.json").read_bytes())
    for canary in report["canaries"]:  # each canary drawn into a burst is reported at that burst's level
        drawn = {r["level"] for r in burst if r["canary_id"] == canary["id"]}
        assert {lv["concurrency"] for lv in canary["levels"]} >= drawn
