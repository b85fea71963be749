"""benchmarks/sglang/arrivals.py on a constructed SGLang request log: one call carrying four prompts (received in
0.1 ms, none cached) and four separate calls 20 ms apart (the last three cached), with a background request and
a lone one that belong to no group."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "sglang" / "arrivals.py"
T0 = 1_796_000_000.0


def line(event: dict[str, object]) -> str:
    return "[2026-12-03 16:00:00] " + json.dumps(event) + "\n"


def received(rids: list[str], max_new_tokens: int) -> str:
    params = [{"max_new_tokens": max_new_tokens} for _ in rids]
    one = len(rids) == 1
    return line(
        {
            "event": "request.received",
            "rid": rids[0] if one else rids,
            "obj": {"sampling_params": params[0] if one else params},
        }
    )


def finished(rid: str, at: float, cached: int) -> str:
    meta = {"request_received_ts": at, "prompt_tokens": 961, "cached_tokens": cached}
    return line({"event": "request.finished", "rid": rid, "out": {"meta_info": meta}})


def test_a_call_with_four_prompts_and_four_separate_calls(tmp_path: Path) -> None:
    log = [received(["a0", "a1", "a2", "a3"], 100)]
    log += [finished(f"a{i}", T0 + i * 0.00003, 0) for i in range(4)]
    for i in range(4):
        log += [received([f"s{i}"], 100), finished(f"s{i}", T0 + 5 + i * 0.02, 960 if i else 0)]
    log += [received(["bg"], 150), finished("bg", T0 + 5.01, 0)]  # background: another max_new_tokens
    log += [received(["lone"], 100), finished("lone", T0 + 9, 0)]
    path = tmp_path / "vm_0.log"
    path.write_text("".join(log) + "not json\n")
    out = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, check=True).stdout
    rows = [r for r in out.splitlines() if r.startswith("| ") and not r.startswith("| t")]
    assert rows == ["| 0.0 | 4 | 1 | 0.09 | 0 | 961 |", "| 5.0 | 4 | 4 | 60.00 | 3 | 961 |"]
    assert "one call: 1 groups, 4 requests; received over a median 0.09 ms; 0 of 4 found cached tokens" in out
    assert "separate: 1 groups, 4 requests; received over a median 60.00 ms; 3 of 4 found cached tokens" in out
    only = [sys.executable, str(SCRIPT), str(path), "--lengths", "1,232"]
    assert "no group" in subprocess.run(only, capture_output=True, text=True, check=True).stdout
