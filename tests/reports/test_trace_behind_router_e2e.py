"""A prefill/decode run behind a router that renames every request: each canary record still meets its engine steps.

vllm-router sends both engines a request id of its own (``___prefill_addr_..___decode_addr_.._<uuid>``), not the
client's ``X-Request-Id``, so no step of either engine's trace names a record's ``request_id``; the answer comes
back under the engine's name for it (``cmpl-<router's id>``), which the record keeps as ``answer_id``
(docs/design.md, "Joining ids"). A real ``loadgen run``: the embedded engine as a prefill and a decode server,
the real vllm-router in front, each engine writing its step trace; then report.json: every record joined, its
provenance from both servers' traces (the salted canary's prompt handed over every time; the kept one found by the
decoder in its own prefix cache after its first request).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from collectors.read.runfolder import load_run
from loadgen.core.steptrace import record_key
from tests.loadgen.cli.clikit import loadgen_run
from tests.loadgen.engine.pd_processes import router_available

pytestmark = pytest.mark.skipif(not router_available(), reason="vllm-router is not installed (pip install '.[test]')")

PROMPT = " ".join(f"word{i}" for i in range(60))
SCENARIO = f"""
name = "renamed"
[endpoint]
kind = "completions"
[[canaries]]
id = "salted"
prompt = "{PROMPT}"
max_tokens = 6
stream = true
cache = "salt"
[[canaries]]
id = "kept"
prompt = "{PROMPT}"
max_tokens = 6
stream = false
[sweep]
levels = [0, 2]
canaries_per_level = 2
warmup = 0
baseline = 1
[background]
max_tokens = [2, 6]
[launcher]
kind = "embedded"
ready_timeout_s = 60
[topology]
mode = "pd"
"""


def test_records_renamed_by_the_router_join_the_trace_through_their_answers_id(tmp_path: Path) -> None:
    done = loadgen_run(SCENARIO, tmp_path / "runs", timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    records = [orjson.loads(line) for p in done.run_dir.glob("canaries*.jsonl") for line in p.read_bytes().splitlines()]
    assert len(records) == 2 * (1 + 2 + 2)
    for r in records:  # the class of problem: the engines knew each request by another id than the client's
        assert r["status"] == "ok" and r["answer_id"], r
        assert record_key(r["answer_id"]) not in (None, r["request_id"]), r["answer_id"]
    steps = load_run(done.run_dir).steps
    assert steps is not None and len(steps.files) == 2  # the prefill and the decode server's traces
    assert not {r["request_id"] for r in records} & set(steps.key.tolist())
    report = orjson.loads((done.run_dir / "report.json").read_bytes())
    assert not [n for n in report["run"]["notices"] if "no step names" in n]
    prov = {}
    for canary in report["canaries"]:
        assert canary["engine_steps"]["joined"] == canary["engine_steps"]["records"] == 5
        prov[canary["id"]] = canary["provenance"]
        assert prov[canary["id"]]["evidence"] == {"engine_trace": 5}, prov
    # salted: the decoder found nothing of its own, the whole prompt came over; kept: after its first request the
    # decoder found the prompt in its own prefix cache, and the trace says so
    assert (prov["salted"]["asked"], prov["salted"]["proven"], prov["salted"]["unknown"]) == ("transfer", 5, 0)
    kept = prov["kept"]  # its first request is handed over; later ones are the decoder's while its cache keeps them
    assert kept["proven"] >= 1 and kept["not_proven"] >= 1 and kept["proven"] + kept["not_proven"] == 5, kept
    assert list(kept["reasons"]) == ["decoder's own GPU hit instead of a transfer"]
