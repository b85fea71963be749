"""``cache = "offload"`` and the tier-emptying resets, end to end: real ``loadgen run`` (real Locust, real HTTP)
against ``offload_server.py``, a server that speaks the offload contract (docs/design.md, "Cache actions") and keeps
every reset and request it saw.

Idle, an offload canary resets the GPU prefix cache alone (no ``reset_external``); under load, or where that reset
is refused, it flushes: distinct filler prompts, each with its own ``cache_salt`` and ``max_tokens`` 1, inside the
context, until the engine counted 1.25 times its GPU cache (``num_gpu_blocks`` x ``block_size``) in them, the total
recorded as ``flush_tokens``. A ``miss`` canary's reset empties the tier too. An endpoint that does not state its
cache's size is refused before any traffic, the label and the endpoint named.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from collectors.jsonl import read_jsonl
from loadgen.cli.main import main
from tests.loadgen.serve_app import script_server, seen

SERVER = Path(__file__).parents[1] / "offload_server.py"
PROMPT = "Nine patient clockmakers mended the tower bells of the drowned city before the spring tide rose"
BLOCKS = 32  # the server's num_gpu_blocks, of 16 tokens: a GPU cache of 512 tokens
FLUSH = math.ceil(1.25 * BLOCKS * 16)

SCENARIO = f"""
name = "offload"
[[canaries]]
id = "tiered"
prompt = "{PROMPT}"
max_tokens = 4
cache = "offload"
[[canaries]]
id = "cold"
prompt = "{PROMPT}"
max_tokens = 4
cache = "miss"
[background]
stream = false
prompt_words = [4, 8]
max_tokens = [40, 60]
[sweep]
levels = [0, 2]
canaries_per_level = 2
warmup = 0
baseline = 1
"""


def _run(url: str, tmp_path: Path, scenario: str, *extra: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    path = tmp_path / "s.toml"
    path.write_text(scenario)
    out = tmp_path / "runs"
    assert main(["run", str(path), "--host", url, "--out", str(out), "--quiet", *extra]) == 0
    (run_dir,) = out.iterdir()
    report = run_dir / "report.json"
    return read_jsonl(run_dir / "canaries.jsonl").rows, orjson.loads(report.read_bytes()) if report.exists() else {}


def test_idle_offload_resets_the_gpu_alone_and_under_load_it_flushes(tmp_path: Path) -> None:
    with script_server(SERVER, "--blocks", str(BLOCKS)) as url:
        rows, report = _run(url, tmp_path, SCENARIO)
        server = seen(url)
    assert all(r["status"] == "ok" for r in rows)
    tiered = [r for r in rows if r["canary_id"] == "tiered"]
    idle, loaded = [r for r in tiered if r["level"] == 0], [r for r in tiered if r["level"] == 2]
    assert len(idle) == 3 and len(loaded) == 2  # the baseline's and level 0's; level 2's
    assert all(r["cache_action"] == "gpu_reset" and r["cache_reset_ok"] is True for r in idle)
    assert all(r["flush_tokens"] is None and "cache_salt" not in r["request"] for r in idle)
    assert all(r["cache_action"] == "flush" and r["cache_reset_status"] is None for r in loaded)
    assert all(FLUSH <= r["flush_tokens"] < FLUSH + 512 for r in loaded)  # it stops at the filler that reaches it

    # the server saw one GPU-only reset per idle offload canary, and a miss's resets empty the tier too
    cold_resets = [r for r in rows if r["canary_id"] == "cold" and r["cache_action"] == "reset"]
    assert len(cold_resets) == 3 and all(r["cache_reset_ok"] for r in cold_resets)
    assert Counter(r["external"] for r in server["resets"]) == {False: len(idle), True: len(cold_resets)}

    # the fillers: each its own salt and text, one token asked, inside the context, counted as the records say
    fillers = [q for q in server["requests"] if q["max_tokens"] == 1]
    assert len({q["salt"] for q in fillers}) == len({q["prompt"] for q in fillers}) == len(fillers) >= 2 * 2
    assert all(q["salt"] and q["tokens"] + 1 <= 512 for q in fillers)
    assert sum(q["tokens"] for q in fillers) == sum(r["flush_tokens"] for r in loaded)
    assert max(q["tokens"] for q in fillers) > 128  # sized up to half the context once the engine counted one

    checks = report["scenario_checks"]["cache_expectations"]  # the report counts each canary's mechanisms
    assert checks["tiered"]["mechanisms"] == {"gpu_reset": 3, "flush": 2}


def test_a_refused_gpu_reset_flushes_instead(tmp_path: Path) -> None:
    scenario = SCENARIO.replace("levels = [0, 2]", "levels = [0]").replace(
        "canaries_per_level = 2", "canaries_per_level = 1"
    )
    with script_server(SERVER, "--blocks", str(BLOCKS), "--refuse-reset") as url:
        rows, _ = _run(url, tmp_path, scenario, "--no-report")
        server = seen(url)
    tiered = [r for r in rows if r["canary_id"] == "tiered"]
    assert len(tiered) == 2
    for r in tiered:  # the refusal is kept beside the flush that followed it
        assert (r["cache_action"], r["cache_reset_status"], r["cache_reset_ok"]) == ("flush", 200, False)
        assert r["flush_tokens"] >= FLUSH
    assert [r["external"] for r in server["resets"]].count(False) == 2


def test_an_endpoint_that_does_not_state_its_cache_size_is_refused_before_any_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO)
    out = tmp_path / "runs"
    with script_server(SERVER, "--no-blocks") as url:
        code = main(["run", str(path), "--host", url, "--out", str(out), "--quiet"])
        server = seen(url)
    assert code != 0
    err = capsys.readouterr().err
    assert f"{url}/metrics: canary 'tiered' has cache = \"offload\"" in err
    assert "vllm:cache_config_info states no num_gpu_blocks" in err
    assert not out.exists() or not any(out.iterdir())  # no run folder
    assert server["resets"] == [] and all("Nine patient" not in q["prompt"] for q in server["requests"])
