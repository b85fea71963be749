"""Whatever the endpoint's timing, every sweep canary shared the server with its level of other requests, by the
server's own count, or the report says it did not.

**The band** (``loadgen.core.band``, docs/design.md "The level's band"): a canary sent at level ``L`` is at its
level when the time-weighted median of the OTHER requests the server had in flight over the canary's life (from
its arrival at the server to its last byte written) lies in ``[L - floor(L / 4), L + ceil(L / 4)]``: 1 -> [1, 2],
3 -> [3, 4], 12 -> [9, 15], 48 -> [36, 60]. The median, because a slot handing over is doubled for a moment (a
floor) or empty for a moment (a ceiling), and those moments are the level's known error, not a mislabel. Beside
the median, a canary may spend at most ``ABOVE_TOP_MAX`` (10%) of its life above the band's top: leaving the top
needs more than a quarter of the level's slots doubled at once; a floor's slot is doubled only for its hand-over
lead (``handover_s``, 0.05 s, or three tokens) of each background request (here 1 to 1.6 s: at most 5% of its
time), so for independent slots that is a rare coincidence of a few tens of milliseconds (under 10% of a 0.48 s
canary's life), and a ceiling is never above its level at all: for the classes whose progress cannot be seen
(a slot sends its next request only once the last has ended), no sweep canary had more than its level of other
requests beside it at the server at any moment of its life, where handing over "on time" (8a9bea0) put up to
twice the level beside it. And a canary outside the band, for any reason, is counted in its level's
``co_residency.not_at_level`` in ``report.json``.

One real headless ``loadgen run`` (real Locust, real HTTP) per timing class of ``timing_server.py`` at levels 1, 3,
12 and 48, three canaries a level: answers in one piece after a fixed delay whatever their length (a buffering
proxy), the same with a random delay, token-by-token streams, and non-streamed answers after a fixed delay. The
server has no ``/metrics``, so the report's witness is the client's own count of its requests in flight. Each
class is a test class, so pytest-xdist's ``loadscope`` runs the classes side by side.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import orjson

from collectors.jsonl import read_jsonl
from loadgen.core.band import CEILING, FLOOR, level_band, time_in_band
from loadgen.core.request import RunRequest
from loadgen.studies.run import run
from tests.loadgen.serve_app import script_server
from tests.loadgen.timing_classes import PLAIN, PROMPT, SERVER, TOKENS, WHOLE_FIXED, WHOLE_RANDOM, Timing, scenario_text

LEVELS = [1, 3, 12, 48]
CANARIES = 3
BASELINE = 2
ABOVE_TOP_MAX = 0.10


def scenario(tmp_path: Path, timing: Timing) -> Path:
    path = tmp_path / "band.toml"
    path.write_text(scenario_text(timing, LEVELS, CANARIES, BASELINE))
    return path


def server_log(url: str) -> list[dict[str, Any]]:
    """The server's log of every canary it served, in arrival order."""
    with urllib.request.urlopen(f"{url}/_log") as resp:
        return [e for e in orjson.loads(resp.read()) if e["tag"].startswith(PROMPT)]


def band_problems(level: int, life: dict[str, Any], bound: str) -> list[str]:
    """What is wrong with one sweep canary's life at the server against its level's band (nothing: at level),
    and for a ceiling class against the ceiling."""
    low, high = level_band(level)
    seconds = {int(k): float(v) for k, v in life["others_seconds"].items()}
    share = time_in_band(seconds, level)
    assert share is not None, life
    problems = []
    if not low <= life["others_median"] <= high:
        problems.append(f"median {life['others_median']} others outside [{low}, {high}]")
    if share.above > ABOVE_TOP_MAX:
        problems.append(f"{share.above:.0%} of its life above {high}")
    if bound == CEILING and life["others_max"] > level:
        problems.append(f"{life['others_max']} others at once, above its ceiling {level}")
    return problems


def check_band(timing: Timing, tmp_path: Path) -> None:
    with script_server(SERVER, *timing.server_args) as url:
        result = run(RunRequest(scenario(tmp_path, timing), host=url, out_dir=tmp_path / "runs"))
        lives = server_log(url)
    assert result.status == "finished"
    records = sorted(read_jsonl(result.run_dir / "canaries.jsonl").rows, key=lambda r: r["sent_at"])
    assert len(records) == len(lives) == BASELINE + CANARIES * len(LEVELS)  # one at a time, in order
    assert all(r["status"] == "ok" for r in records)

    problems: list[str] = []
    outside = dict.fromkeys(LEVELS, 0)
    seen_bound = False  # a canary of the class's own bound was sent: every later one says it too
    for record, life in zip(records, lives, strict=True):
        if record["phase"] != "sweep":
            continue
        level = record["level"]
        bound = record.get("level_bound")
        if bound != timing.bound and not (timing.learnt and bound == FLOOR and not seen_bound):
            problems.append(f"level {level} canary {record['request_id']}: level_bound {bound!r}")
        seen_bound |= bound == timing.bound
        wrong = band_problems(level, life, timing.bound)
        outside[level] += bool(wrong and wrong[0].startswith("median"))
        problems += [f"level {level} canary {record['request_id']}: {w} ({life['others_seconds']})" for w in wrong]
    if not seen_bound:
        problems.append(f"no sweep canary's level_bound was {timing.bound!r}")

    report = orjson.loads((result.run_dir / "report.json").read_bytes())
    for entry in report["levels"]:
        co = entry["co_residency"]
        flagged = co.get("not_at_level")  # the report's per-level "not at level" count
        if flagged is None or flagged < outside[entry["concurrency"]]:
            problems.append(
                f"level {entry['concurrency']}: {outside[entry['concurrency']]} canaries outside the band by the "
                f"server's count, report.json co_residency.not_at_level {flagged!r}"
            )
    assert not problems, "\n".join(problems)


class TestWholeFixed:
    def test_every_canary_in_its_band(self, tmp_path: Path) -> None:
        check_band(WHOLE_FIXED, tmp_path)


class TestWholeRandom:
    def test_every_canary_in_its_band(self, tmp_path: Path) -> None:
        check_band(WHOLE_RANDOM, tmp_path)


class TestTokens:
    def test_every_canary_in_its_band(self, tmp_path: Path) -> None:
        check_band(TOKENS, tmp_path)


class TestPlain:
    def test_every_canary_in_its_band(self, tmp_path: Path) -> None:
        check_band(PLAIN, tmp_path)
