"""End to end through the real CLI: an endpoint that never finishes, answers without end, or answers
what it could not have generated is measured (records with an ``error_kind``), never waited on forever.

``fault_server.py`` misbehaves by prompt: ``trickle`` keeps the connection alive with a byte (or an SSE
``: ping``) every 0.2 s, well inside ``read_timeout_s = 1``, so only the request's total deadline ends
it (by default ``read_timeout_s`` + 2 s per max_tokens: 3 s here); ``huge:65`` streams one 65 MiB line,
over the default 64 MiB ``max_response_bytes``; ``too-many-tokens`` returns 5 tokens for ``max_tokens = 3``.
The background requests of the same run go through the same client code (``send_payload``), whose
deadline and cap ``tests/loadgen/load/test_client.py`` checks directly.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from collectors.jsonl import read_jsonl
from tests.loadgen.cli.clikit import loadgen_run

SCENARIO = """
name = "hostile"
[endpoint]
base_url = "{url}"
read_timeout_s = 1
[[canaries]]
id = "trickle-stream"
prompt = "trickle"
max_tokens = 1
stream = true
[[canaries]]
id = "trickle-whole"
prompt = "trickle"
max_tokens = 1
[[canaries]]
id = "huge"
prompt = "huge:65"
stream = true
[[canaries]]
id = "too-long"
prompt = "too-many-tokens"
max_tokens = 3
[[canaries]]
id = "fine"
prompt = "ok"
[sweep]
levels = [0]
canaries_per_level = 1
warmup = 0
baseline = 0
"""


def test_hostile_answers_become_records_and_the_run_finishes(fault_server: str, tmp_path: Path) -> None:
    out = loadgen_run(SCENARIO.format(url=fault_server), tmp_path / "runs")
    assert out.returncode == 0, out.stderr
    run_dir = out.run_dir
    records = {r["canary_id"]: r for r in read_jsonl(run_dir / "canaries.jsonl").rows}
    assert set(records) == {"trickle-stream", "trickle-whole", "huge", "too-long", "fine"}

    for name in ("trickle-stream", "trickle-whole"):
        r = records[name]
        assert r["status"] == "error" and r["error_kind"] == "timeout", r
        assert "total deadline of 3 s hit" in r["error_message"]
        assert 2.9 < r["latency_s"] < 5.0  # the server would have kept it for 10 s
    assert records["huge"]["error_kind"] == "response_too_large"
    assert "67108864 bytes (endpoint.max_response_bytes)" in records["huge"]["error_message"]
    too_long = records["too-long"]
    assert too_long["error_kind"] == "malformed_body" and too_long["token_ids"] is None
    assert too_long["error_message"] == "5 tokens generated, more than the 3 max_tokens asked for"
    assert records["fine"]["status"] == "ok" and records["fine"]["token_ids"] == [101, 102, 103]

    report = orjson.loads((run_dir / "report.json").read_bytes())
    kinds = {c["id"]: c["overall"]["error_kinds"] for c in report["canaries"]}
    assert kinds["huge"] == {"response_too_large": 1} and kinds["trickle-whole"] == {"timeout": 1}
