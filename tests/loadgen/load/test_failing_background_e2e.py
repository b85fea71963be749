"""Background the endpoint refuses backs off, and the level it cannot hold is ended early and recorded.

A real ``loadgen run`` (real Locust, real HTTP) against ``timing_server.py``'s ``/refuse``: every background
request gets HTTP 400 with an OpenAI-style JSON error (a prompt longer than the context), the canaries are
answered. Each background user pauses after failures in a row (``loadgen.load.failing``: 0.05 s doubling to
2 s, after 3 in a row), and once a level's background has failed for good (at least 4 failures per slot and
8 in all, under a tenth ok) the coordinator ends the level, whose waiting canary is not sent, and goes on to the
next. The bound on what the endpoint sees: fewer than 100 background requests in all for levels 2 and 8 (the
stops come after 8 and 32 failures), and never more than 7 a second per background user (a user that fails
sends 3 at once, then after 0.05, 0.1, 0.2 and 0.4 s, then 0.8 s and more apart): under 57 a second at level
8. Re-sent at once, the same background reached about 1,400 requests a second, for as long as the canaries
waited out ``settle_timeout_s`` (10 s each) and went out not held, alone.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import orjson

from collectors.jsonl import read_jsonl
from loadgen.core.request import RunRequest
from loadgen.studies.run import run
from tests.loadgen.serve_app import script_server

SERVER = Path(__file__).parents[1] / "timing_server.py"
PROMPT = "canary beside refused background"
LEVELS = [2, 8]
MAX_REQUESTS = 100  # in all, over both levels
MAX_PER_SECOND = 7 * max(LEVELS)  # in any one second: 7 per background user


def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "refused.toml"
    path.write_text(f"""
name = "refused"
[endpoint]
kind = "completions"
[[canaries]]
id = "c"
prompt = "{PROMPT}"
max_tokens = 4
seed = 0
logprobs = true
stream = false
[background]
seed = 3
prompt_words = [4, 8]
max_tokens = [4, 8]
stream = false
[sweep]
levels = {LEVELS}
canaries_per_level = 2
warmup = 0
baseline = 1
""")
    return path


def busiest_second(arrivals: list[float]) -> int:
    """The most requests that arrived in any one second."""
    return max((sum(t <= s < t + 1.0 for s in arrivals) for t in arrivals), default=0)


def test_refused_background_backs_off_and_ends_its_levels(tmp_path: Path) -> None:
    with script_server(SERVER, "--timing", "plain", "--delay-s", "0.05") as url:
        result = run(RunRequest(scenario(tmp_path), host=f"{url}/refuse", out_dir=tmp_path / "runs"))
        with urllib.request.urlopen(f"{url}/_log") as resp:
            arrivals = [e["arrival"] for e in orjson.loads(resp.read()) if e["status"] == 400]
    assert result.status == "finished"  # an ended level is complete, as a claim-ended one is

    assert arrivals, "no background request reached the server"
    assert len(arrivals) < MAX_REQUESTS, f"{len(arrivals)} background requests against an endpoint refusing them"
    busiest = busiest_second(arrivals)
    assert busiest <= MAX_PER_SECOND, f"{busiest} background requests in one second"

    manifest = orjson.loads((result.run_dir / "manifest.json").read_bytes())
    assert manifest["stages_finished"] is True and manifest["levels_ended_by_claim"] == []
    ended = manifest["levels_ended_by_background"]
    assert [e["level"] for e in ended] == LEVELS, ended  # the run went on to the next level, which failed too
    for e in ended:
        assert e["completed"] == 0 and e["quota"] == 2
        assert e["background_errors"] == e["background_requests"] >= max(8, 4 * e["level"])
        assert e["first_error"].startswith("HTTP 400: This model's maximum context length is 16 tokens.")
        assert "\n" not in e["first_error"] and len(e["first_error"]) <= 200
    said = [n for n in manifest["notices"] if n.startswith("Background requests failed 3 in a row")]
    assert len(said) == 1 and "HTTP 400: This model's maximum context length" in said[0], manifest["notices"]

    canaries = read_jsonl(result.run_dir / "canaries.jsonl").rows
    assert [r["phase"] for r in canaries] == ["baseline"]  # the waiting canaries of the ended levels never went
    background = read_jsonl(result.run_dir / "background.jsonl").rows
    refused = [b for b in background if b["phase"] == "sweep"]
    assert refused and all(b["status"] == "error" and b["http_status"] == 400 for b in refused)
    assert all(b["error_message"].startswith("HTTP 400: This model's maximum context length") for b in refused)
