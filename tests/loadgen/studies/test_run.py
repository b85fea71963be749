"""End to end: a real headless Locust run against a real local server, through ``loadgen.studies.run``."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import orjson

from collectors.jsonl import read_jsonl
from loadgen.core.manifest import read_manifest
from loadgen.core.record import CanaryRecord
from loadgen.core.request import RunRequest
from loadgen.studies.run import run


def test_every_canary_sent_is_recorded_once(fault_server: str, quickstart_short_settle: Path, tmp_path: Path) -> None:
    result = run(
        RunRequest(
            quickstart_short_settle,
            host=fault_server,
            out_dir=tmp_path / "runs",
            levels=(0, 2, 4),
            canaries_per_level=3,
            labels={"batch_invariant": "0"},
            report=False,
        )
    )
    assert result.status == "finished" and result.locust_exit == 0
    run_dir = result.run_dir
    read = read_jsonl(run_dir / "canaries.jsonl")
    assert read.skipped == 0
    records = [CanaryRecord.from_dict(r) for r in read.rows]
    # quickstart: warmup 1, baseline 4, then 3 per level
    assert Counter((r.phase, r.level) for r in records) == {
        ("warmup", 0): 1,
        ("baseline", 0): 4,
        ("sweep", 0): 3,
        ("sweep", 2): 3,
        ("sweep", 4): 3,
    }
    assert len({r.request_id for r in records}) == len(records)
    for r in records:
        assert r.status == "ok" and r.token_ids == [101, 102, 103] and r.logprobs == [-0.1, -0.25, -0.5]
        assert r.request["temperature"] == 0 and r.request["top_p"] == 1 and r.request["seed"] == 0
        assert r.request["max_tokens"] == 64 and r.request["return_token_ids"] is True
        assert r.latency_s is not None and r.latency_s > 0 and r.sent_at > 1.7e9
    sent_at = [r.sent_at for r in records]
    assert sent_at == sorted(sent_at)  # one canary user, strictly sequential

    manifest = read_manifest(run_dir)
    assert manifest.status == "finished" and manifest.finished
    assert manifest.labels == {"batch_invariant": "0"}
    assert manifest.canaries_reported == len(records)
    (process,) = run_dir.glob("process-*.json")
    counts = orjson.loads(process.read_bytes())
    assert counts["canaries_written"] == len(records) and counts["canary_write_failures"] == 0
    assert manifest.features["completions"]["identity"] == "token_ids"
    assert manifest.levels == [0, 2, 4]
    # this server has no /metrics: a notice, not a failure
    assert manifest.engine_metrics is not None and manifest.engine_metrics["available"] is False
    assert f"{fault_server}/metrics: no Prometheus /metrics" in manifest.notices[0]

    background = read_jsonl(run_dir / "background.jsonl").rows
    levels = Counter(b["level"] for b in background)
    assert levels[2] > 0 and levels[4] > 0 and levels[0] == 0

    with open(run_dir / "locust_stats.csv") as fh:
        stats = {row["Name"]: row for row in csv.DictReader(fh)}
    assert int(stats["canary:story"]["Request Count"]) == len(records)
    # Locust rewrites locust_stats.csv once a second and only closes it at the end, so the requests of
    # the last second or so may be missing from it; every one before must be there (background requests
    # reach Locust's statistics in bulk, at most a fold interval late)
    ends = sorted(b["sent_at"] + b["latency_s"] for b in background)
    settled = sum(1 for t in ends if t <= ends[-1] - 2.0)
    assert settled <= int(stats["background"]["Request Count"]) <= len(background)


def test_endpoint_faults_are_recorded_not_dropped(fault_server: str, tmp_path: Path) -> None:
    scenario = tmp_path / "faulty.toml"
    scenario.write_text("""
name = "faulty"
[[canaries]]
id = "bad"
prompt = "status:503"
[[canaries]]
id = "cut"
prompt = "reset"
stream = true
[sweep]
levels = [0, 1]
canaries_per_level = 2
warmup = 0
baseline = 1
""")
    result = run(RunRequest(scenario, host=fault_server, out_dir=tmp_path / "runs", report=False))
    assert result.status == "endpoint_failed"  # every stage met its quota, but every canary failed: said so
    assert result.headline == ["Endpoint failed: 10 of 10 canaries failed (loadgen report gives the error kinds)."]
    rows = read_jsonl(result.run_dir / "canaries.jsonl").rows
    kinds = Counter((r["canary_id"], r["status"], r["error_kind"]) for r in rows)
    assert kinds == {("bad", "error", "http_status"): 5, ("cut", "error", "truncated_stream"): 5}
    assert all(orjson.dumps(r) for r in rows)
