"""benchmarks/sglang/witness.py on a constructed run: SGLang's request log against the tool's records.

One canary at level 2 whose two background streams SGLang finished 0.1 s into the canary's life while the
client read their ends 1 s later: the log's witness sees no other request for most of the canary's life, the
client's records two, and each stream's end is 1.0 s late."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "sglang" / "witness.py"
T0 = 1_796_000_000.0


def finished(received: float, finished_at: float, max_new_tokens: int, prompt_tokens: int) -> str:
    meta = {
        "request_received_ts": received,
        "api_server_dispatch_finish_ts": received + 0.001,
        "queue_time": 0.0,
        "request_finished_ts": finished_at,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 50,
    }
    entry = {"event": "request.finished", "obj": {"sampling_params": {"max_new_tokens": max_new_tokens}}}
    return "[2026-12-03 06:30:00] " + json.dumps({**entry, "out": {"meta_info": meta}}) + "\n"


def test_the_log_and_the_records_are_joined_per_canary_and_per_stream(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    canary = {"phase": "sweep", "status": "ok", "level": 2, "sent_at": T0 + 1.0, "latency_s": 1.0}
    canary |= {"background_held_at_send": 2, "request": {"sampling_params": {"max_new_tokens": 96}}}
    (run / "canaries.jsonl").write_text(json.dumps(canary) + "\n")
    background: list[dict[str, Any]] = [
        {"phase": "sweep", "status": "ok", "level": 2, "sent_at": T0 + 0.5 + i, "ttft_s": 0.01, "latency_s": 1.7}
        | {"prompt_tokens": 10 + i}
        for i in (0, 0.1)
    ]
    (run / "background.jsonl").write_text("".join(json.dumps(b) + "\n" for b in background))
    log = tmp_path / "sglang.log"
    log.write_text(
        finished(T0 + 1.0, T0 + 2.0, 96, 7)
        + "".join(finished(b["sent_at"], b["sent_at"] + 0.7, 200, b["prompt_tokens"]) for b in background)
        + '[2026-12-03 06:30:00] {"event": "request.received"}\n'
    )
    out = subprocess.run([sys.executable, str(SCRIPT), str(run), str(log)], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == "run: 3 requests in SGLang's log, 2 background records"
    [row] = [line for line in lines[2:] if "|" in line]
    held, log_side, client_side = row.split("|")
    assert held.split() == ["2", "2"]
    assert [float(x) for x in log_side.split()] == [0, 0, 2]  # both ended 0.2-0.3 s into the canary's 1 s
    assert [float(x) for x in client_side.split()] == [2, 2, 2]  # the client saw them running throughout
    assert lines[-1].split()[:3] == ["2", "1.000", "/"]  # each stream's end seen 1.0 s after SGLang's
