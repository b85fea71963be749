"""Guaranteed misses and hits under load, end to end, against an engine that behaves like vLLM 0.26.

What real vLLM showed (docs/results/vllm-h200/): a prefix-cache reset sent while requests run is
refused (HTTP 200, ``{"success": false}``) and the next request hits anyway; ``cached_tokens`` is only
reported with ``--enable-prompt-tokens-details``. The embedded engine does the same, so these runs
reproduce the class of problem: a forced reset under load is recorded as refused and its hits are
flagged, ``cache = "miss"`` salts under load and resets when idle, and without cached tokens the
engine's own prefix-cache counters verify what they can.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from collectors.jsonl import read_jsonl
from loadgen.core.manifest import read_manifest
from loadgen.core.request import RunRequest
from loadgen.launchers.process import start_embedded
from loadgen.studies.run import run

# no other test sends a prompt that starts like this one: the session's shared engine has none of its blocks
PROMPT = "Seven quiet lighthouse keepers counted the grey ships that crossed the northern bay before the winter storms"

SCENARIO = f"""
name = "cache-mechanisms"
[[canaries]]
id = "warm"
prompt = "{PROMPT}"
max_tokens = 8
expect_cache = "hit"
[[canaries]]
id = "forced"
prompt = "{PROMPT}"
max_tokens = 8
cache = "reset"
expect_cache = "miss"
[[canaries]]
id = "cold"
prompt = "{PROMPT}"
max_tokens = 8
cache = "miss"
expect_cache = "miss"
[background]
stream = true
max_tokens = [200, 300]
[sweep]
levels = [0, 3]
canaries_per_level = 4
warmup = 0
baseline = 1
# a pause after each canary: the 50 ms /metrics scraper samples between two canaries even on a loaded machine
canary_pace_s = 0.3
"""


@pytest.fixture(scope="module")
def quiet_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The embedded engine as vLLM serves by default: no ``prompt_tokens_details`` in usage."""
    log = tmp_path_factory.mktemp("engine") / "engine.log"
    with start_embedded(["--no-enable-prompt-tokens-details"], log_path=log) as engine:
        yield engine.url


def _run(url: str, tmp_path: Path) -> tuple[Path, list[dict[str, Any]], dict[str, Any]]:
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO)
    result = run(RunRequest(scenario, host=url, out_dir=tmp_path / "runs"))
    assert result.status == "finished"
    rows = read_jsonl(result.run_dir / "canaries.jsonl").rows
    report = orjson.loads((result.run_dir / "report.json").read_bytes())
    return result.run_dir, rows, report


def test_forced_reset_under_load_is_refused_and_miss_salts_instead(engine_url: str, tmp_path: Path) -> None:
    _, rows, report = _run(engine_url, tmp_path)
    busy = [r for r in rows if r["level"] == 3]
    forced = [r for r in busy if r["canary_id"] == "forced"]
    # the engine refuses to drop blocks in use and says so in the body, as vLLM 0.26 does
    assert forced and all(r["cache_action"] == "reset" and r["cache_reset_status"] == 200 for r in forced)
    assert all(r["cache_reset_ok"] is False for r in forced)
    # "miss" under load never tries the reset: a fresh salt per request, a guaranteed miss
    cold_busy = [r for r in busy if r["canary_id"] == "cold"]
    assert cold_busy and all(r["cache_action"] == "salt" and r["request"].get("cache_salt") for r in cold_busy)
    assert all(r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0 for r in cold_busy)
    # when idle, "miss" resets, and the reset takes
    cold_idle = [r for r in rows if r["canary_id"] == "cold" and r["level"] == 0]
    assert cold_idle and all(r["cache_action"] == "reset" and r["cache_reset_ok"] is True for r in cold_idle)

    checks = report["scenario_checks"]["cache_expectations"]
    assert checks["forced"]["resets_refused"] == len(forced)
    assert checks["forced"]["violated"] >= 1  # the refused reset left the warm prompt cached: it hit
    assert checks["cold"]["violated"] == 0 and checks["cold"]["met"] == checks["cold"]["canaries"]
    assert checks["cold"]["mechanisms"] == dict(Counter(r["cache_action"] for r in rows if r["canary_id"] == "cold"))
    assert checks["warm"]["mechanisms"] == {"kept": checks["warm"]["canaries"]}
    # the very first canary of the run met an empty cache: a real miss, rightly flagged
    assert checks["warm"]["violated"] == 1
    notice = next(n for n in report["run"]["notices"] if n.startswith("Canary forced was meant to miss"))
    assert 'cache = "miss"' in notice


def test_counters_verify_when_cached_tokens_are_not_reported(quiet_engine: str, tmp_path: Path) -> None:
    run_dir, rows, report = _run(quiet_engine, tmp_path)
    assert all(r["usage"].get("prompt_tokens_details") is None for r in rows if r["status"] == "ok")
    settings = read_manifest(run_dir).server["config"]["settings"]
    assert settings["cached_tokens_reported"] is False and settings["prefix_caching"] is True
    checks = report["scenario_checks"]["cache_expectations"]
    for cid in ("warm", "cold"):
        c = checks[cid]
        assert c["evidence"]["cached_tokens"] == 0 and c["evidence"]["counters"] >= 1, c
    # what the counters decide agrees with what cached_tokens said in the run above: the first warm canary
    # (an empty cache) missed, every other decided warm one hit, and every decided cold one missed
    assert checks["warm"]["violated"] == 1 and checks["warm"]["hits"] >= 1
    assert checks["cold"]["violated"] == 0 and checks["cold"]["misses"] >= 1
    # sent one after another with nothing else running (the baseline and level 0: 5 of each), every canary
    # is decided, although each one's lifetime window takes in the next canary's lookup
    for cid in ("warm", "cold"):
        assert checks[cid]["hits"] + checks[cid]["misses"] >= 5, checks[cid]
    unverified = [n for n in report["run"]["notices"] if "did not say whether they hit" in n]
    assert all("--enable-prompt-tokens-details" in n for n in unverified)
    md = (run_dir / "report.md").read_text()
    assert "Server says: prefix caching on (block 16), batch-invariant off" in md
    assert "cached tokens not reported" in md
