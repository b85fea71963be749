"""Every request of a real run carries its id, as the server sees it: the join key of the engine step trace.

A real ``loadgen run`` (real Locust, real HTTP) against ``concurrency_server.py --dialect sglang`` through
SGLang's native ``/generate``, which logs each request's ``X-Request-Id`` header and the ``rid`` of its body.
Every canary record's ``request_id`` must have arrived as both, in the request that made the record; each
background request must carry an id of its own (32 hex digits, none repeated); a burst sent in one request
carries one ``rid`` per copy, each copy's record's, in prompt order, and the first as its header. The
records' ``request`` bodies stay without ``rid``: the report keys canaries by their bodies
(docs/design.md, "The engine step trace": joining ids).
"""

from __future__ import annotations

import re
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from collectors.jsonl import read_jsonl
from loadgen.cli.main import main
from loadgen.runs.probe import PROBE_PROMPT
from tests.loadgen.serve_app import script_server

SERVER = Path(__file__).parents[1] / "concurrency_server.py"
PROMPT = "the canary whose id the server logs"
HEX32 = re.compile(r"[0-9a-f]{32}")
SCENARIO = f"""
name = "request-ids"
[endpoint]
kind = "generate"
[[canaries]]
id = "c"
prompt = "{PROMPT}"
max_tokens = 6
stream = false
[background]
seed = 5
prompt_words = [4, 8]
max_tokens = [20, 30]
stream = true
handover_s = 0.05
[sweep]
levels = [0, 2]
canaries_per_level = 2
warmup = 0
baseline = 1
burst = [3]
burst_send = "one-request"
"""


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with script_server(SERVER, "--dialect", "sglang", "--token-s", "0.005") as url:
        yield url


def _arrivals(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/_arrivals") as resp:
        return [a for a in orjson.loads(resp.read()) if not a["prompt"].startswith(PROBE_PROMPT[:20])]


def test_every_request_carries_its_id_and_a_canarys_is_its_records(server: str, tmp_path: Path) -> None:
    scenario = tmp_path / "ids.toml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "runs"
    assert main(["run", str(scenario), "--host", server, "--out", str(out), "--no-report", "--quiet"]) == 0
    (run_dir,) = out.iterdir()
    records = read_jsonl(run_dir / "canaries.jsonl").rows
    arrivals = _arrivals(server)
    canaries = [a for a in arrivals if PROMPT[:20] in a["prompt"]]  # a burst's prompt is its list's text
    background = [a for a in arrivals if PROMPT[:20] not in a["prompt"]]

    assert all(r["status"] == "ok" and "rid" not in r["request"] for r in records)
    singles = [a for a in canaries if isinstance(a["rid"], str)]
    bursts = [a for a in canaries if isinstance(a["rid"], list)]
    assert len(singles) + len(bursts) == len(canaries)
    # one request per canary record apart from the burst's, which sent its three copies in one
    alone = [r for r in records if not r["burst"]]
    assert len(singles) == len(alone) == 1 + 2 * 2
    assert sorted(a["request_id"] for a in singles) == sorted(r["request_id"] for r in alone)
    assert all(a["rid"] == a["request_id"] for a in singles)  # /generate takes it in the body too

    (burst,) = bursts
    copies = [r for r in records if r["burst"]]
    assert len(copies) == len(burst["rid"]) == 3
    assert Counter(burst["rid"]) == Counter(r["request_id"] for r in copies)  # one rid per copy, each a record's
    assert burst["request_id"] == burst["rid"][0]

    ids = [a["request_id"] for a in background]
    assert len(ids) >= 2 and all(isinstance(i, str) and HEX32.fullmatch(i) for i in ids)
    assert len(set(ids)) == len(ids)  # each background request its own
    assert all(a["rid"] == a["request_id"] for a in background)
    every = [a["request_id"] for a in canaries + background]
    assert len(set(every)) == len(every)  # no id twice in the run
