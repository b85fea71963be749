"""Background aimed at one phase of the canary, timed at the server (``loadgen.load.phase``, docs/design.md
"Background aimed at one phase"): through ``python -m loadgen run`` against ``timing_server.py``'s token streams,
whose log has every request's arrival and end.

- ``phase = "decode"``: each sweep canary arrives with no background request in flight, no background request
  arrives before the canary's first token was seen, and some arrive while it decodes;
- ``phase = "prefill"``: each sweep canary arrives beside one started request per slot, and no background request
  arrives from its arrival to its end;
- a distributed run of a phase mode is refused before any load, naming the option.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from collectors.jsonl import read_jsonl
from tests.loadgen.serve_app import script_server
from tests.loadgen.timing_classes import PROMPT, SERVER

LEVEL = 2
CANARIES = 3
SCENARIO = f"""
name = "phase"
[endpoint]
kind = "completions"
[[canaries]]
id = "c"
prompt = "{PROMPT}"
max_tokens = 12
stream = true
[background]
seed = 3
prompt_words = [2, 6]
max_tokens = [20, 30]
phase = "{{phase}}"
[sweep]
levels = [{LEVEL}]
canaries_per_level = {CANARIES}
warmup = 0
baseline = 1
settle_timeout_s = 5
"""


def _run(tmp_path: Path, phase: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    scenario = tmp_path / f"{phase}.toml"
    scenario.write_text(SCENARIO.replace("{phase}", phase))
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "loadgen", "run", str(scenario), "--out", str(out), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180), out


def _served(tmp_path: Path, phase: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The sweep canaries' records, and the server's log of canaries and of background requests, each in order."""
    with script_server(SERVER, "--timing", "tokens", "--token-s", "0.01") as url:
        done, out = _run(tmp_path, phase, "--host", url)
        with urllib.request.urlopen(f"{url}/_log") as resp:
            log = orjson.loads(resp.read())
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")]
    records = [r for r in read_jsonl(run_dir / "canaries.jsonl").rows if r["phase"] == "sweep"]
    report = orjson.loads((run_dir / "report.json").read_bytes())
    assert report["run"]["background_phase"] == phase
    assert len(records) == CANARIES and all(r["background_phase"] == phase for r in records), records
    assert all(r["held_at_send"] for r in records), records
    canaries = [e for e in log if e["tag"].startswith(PROMPT)]
    background = [e for e in log if not e["tag"].startswith(PROMPT) and e["stream"]]  # the probe's is not streamed
    return records, canaries[-CANARIES:], background


def test_decode_mode_sends_background_only_while_the_canary_decodes(tmp_path: Path) -> None:
    records, canaries, background = _served(tmp_path, "decode")
    for record, canary in zip(records, canaries, strict=True):
        assert canary["others_at_arrival"] == 0, canary
        seen = record["sent_at"] + record["ttft_s"]  # the client saw the first token, the gate opened after
        during = [b for b in background if canary["arrival"] < b["arrival"] < canary["end"]]
        assert during, (canary, background)
        assert all(b["arrival"] >= seen for b in during), (seen, during)
        assert canary["others_max"] >= LEVEL, canary
    # nothing is sent between canaries: every background request arrived during a sweep canary's life
    assert all(any(c["arrival"] < b["arrival"] < c["end"] for c in canaries) for b in background), background


def test_prefill_mode_prefills_the_background_before_the_canary_and_sends_none_during_it(tmp_path: Path) -> None:
    _, canaries, background = _served(tmp_path, "prefill")
    for canary in canaries:
        assert canary["others_at_arrival"] == LEVEL, canary
        assert not [b for b in background if canary["arrival"] <= b["arrival"] <= canary["end"]], canary
    # one request per slot before each canary, and no others
    assert len(background) == LEVEL * CANARIES, background


def test_a_phase_mode_refuses_worker_processes(tmp_path: Path) -> None:
    done, out = _run(tmp_path, "decode", "--host", "http://127.0.0.1:9", "--processes", "2")
    assert done.returncode == 2
    assert '--processes 2: background.phase = "decode" needs the canary user and the background in one process' in (
        done.stderr
    )
    assert not [p for p in out.iterdir() if not p.name.startswith(".")] if out.exists() else True
