"""``loadgen onset`` through the real CLI against a server whose onset is known by construction.

``onset_server.py --diverge-above K`` changes a completion's last token when more than K requests
(itself included) shared the server for most of the request's life. A canary at level L shares it
with L background requests, so L + 1 are in flight: the onset is level K. The CLI runs as a
subprocess (``python -m loadgen onset``), each visited level a real run (real Locust, real HTTP).
For two K the search finds level K, with K - 1 the highest clean level, in the order doubling then
bisection prescribes, and the server's own count of what each sweep canary shared (the median over
its life) is its level + 1; a server that never diverges gives ``onset_level: null``. Bad options
fail before any traffic.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from collectors.jsonl import read_jsonl
from tests.loadgen.serve_app import script_server

SERVER = Path(__file__).parents[1] / "onset_server.py"
PROMPT = "canary for the onset search"


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    with script_server(SERVER, "--diverge-above", str(request.param)) as url:
        yield url


def scenario(tmp_path: Path, *, baseline: int = 1) -> Path:
    # a 40-token canary (0.4 s) lasts more than twice a hand-over's extra request (a few tokens, handover_s
    # 0.05), so the median count the server sees over its life is its level + 1
    path = tmp_path / "onset.toml"
    path.write_text(f"""
name = "onset-test"
[endpoint]
kind = "completions"
[[canaries]]
id = "c"
prompt = "{PROMPT}"
max_tokens = 40
seed = 0
logprobs = true
top_logprobs = 2
stream = true
[background]
seed = 3
prompt_words = [4, 8]
max_tokens = [80, 120]
stream = true
handover_s = 0.05
[sweep]
levels = [0]
canaries_per_level = 2
warmup = 0
baseline = {baseline}
""")
    return path


def onset_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen", "onset", *args], capture_output=True, text=True, timeout=300
    )


def _search(url: str, tmp_path: Path, max_level: int) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Path]:
    out = onset_cli(str(scenario(tmp_path)), "--host", url, "--max-level", str(max_level), "--out", str(tmp_path / "o"))
    assert out.returncode == 0, out.stdout + out.stderr
    study = Path(out.stdout.strip().splitlines()[-1])  # the last line: the study folder
    return out, orjson.loads((study / "onset.json").read_bytes()), study


def _check_levels_as_the_server_saw_them(url: str, study: Path, data: dict[str, Any]) -> None:
    """Every visited level is a finished run folder with a report; each sweep canary shared the server with
    its level of other requests for most of its life (the median count), never two fewer, by the server's own count."""
    records = []
    for entry in data["levels"]:
        run_dir = study / entry["run_dir"]
        assert (run_dir / "report.json").is_file() and entry["status"] == "finished"
        records += read_jsonl(run_dir / "canaries.jsonl").rows
    records.sort(key=lambda r: r["sent_at"])
    with urllib.request.urlopen(f"{url}/_seen") as resp:
        seen = [s for s in orjson.loads(resp.read()) if s["prompt"] == PROMPT]
    assert len(seen) == len(records) == data["canaries"]
    for record, server_saw in zip(records, seen, strict=True):
        assert record["status"] == "ok"
        if record["phase"] == "sweep":
            # the floor, save a moment with one fewer: a successor its slot's reader, starved of CPU, started late
            assert server_saw["fewest"] >= record["level"], (record["level"], server_saw)
            assert server_saw["median"] == record["level"] + 1, (record["level"], server_saw)


@pytest.mark.parametrize(
    ("server", "k", "max_level", "tried"),
    [(2, 2, 8, [1, 2]), (3, 3, 4, [1, 2, 4, 3])],
    ids=["K=2", "K=3-bisection"],
    indirect=["server"],
)
def test_onset_is_the_level_with_k_plus_one_in_flight(
    server: str, k: int, max_level: int, tried: list[int], tmp_path: Path
) -> None:
    out, data, study = _search(server, tmp_path, max_level)
    assert data["onset_level"] == k and data["highest_clean_level"] == k - 1 and data["decided"] is True
    assert data["levels_tried"] == tried
    verdicts = {e["level"]: e["verdict"] for e in data["levels"]}
    assert verdicts == {level: "divergent" if level >= k else "clean" for level in tried}
    assert all(e["earliest_divergence"] == 39 for e in data["levels"] if e["verdict"] == "divergent")
    assert data["rule"]["canaries_per_level"] == 2 and data["rule"]["upper_bound_95"] == pytest.approx(0.7764, 1e-3)
    assert data["sweep_canaries"] == 2 * len(tried) and data["canaries"] == 3 * len(tried)  # + one baseline each
    assert f"onset: level {k} (highest clean level {k - 1})" in out.stdout
    assert "rule: a level is clean when all 2 canaries" in out.stdout and "95% confidence" in out.stdout
    assert "risk: " in out.stdout and "hide below the onset" in out.stdout
    clean = ", ".join(str(level) for level in sorted(tried) if level < k)
    assert f"bound: level{'s' if k > 2 else ''} {clean}" in out.stdout and "below 77.6%" in out.stdout
    _check_levels_as_the_server_saw_them(server, study, data)


@pytest.mark.parametrize("server", [1], indirect=True)
def test_a_search_that_found_no_clean_level_states_no_bound_and_shows_progress(server: str, tmp_path: Path) -> None:
    """Level 1 diverges at once: no level tried was clean, so no bound is printed for one; each level's run
    shows its progress on stderr as ``loadgen run`` does, and stdout keeps only the result."""
    out, data, _ = _search(server, tmp_path, 8)
    assert data["onset_level"] == 1 and data["levels_tried"] == [1]
    bound = next(line for line in out.stdout.splitlines() if line.startswith("bound: "))
    assert bound.startswith("bound: none: no level tried was clean"), bound
    assert "0 divergences" not in out.stdout
    assert "level 1: divergent (2 canaries, 2 diverged (rate 95% CI " in out.stdout
    assert "; measured 1 divergent)" in out.stdout  # what the search went by: the level its canaries measured
    assert "run folder " in out.stderr and "level 1 done: canaries 2/2" in out.stderr
    assert "load done: 3/3 canaries, 0 errors" in out.stderr
    assert "run folder" not in out.stdout


@pytest.mark.parametrize("server", [100], indirect=True)
def test_no_onset_up_to_max_level_is_null(server: str, tmp_path: Path) -> None:
    out, data, study = _search(server, tmp_path, 2)
    assert data["onset_level"] is None and data["decided"] is True and data["stopped"] is None
    assert data["highest_clean_level"] == 2 and data["levels_tried"] == [1, 2]
    assert "onset: none up to level 2 (highest clean level 2)" in out.stdout
    _check_levels_as_the_server_saw_them(server, study, data)


def test_bad_options_fail_before_any_traffic(tmp_path: Path) -> None:
    out = onset_cli(str(scenario(tmp_path)), "--host", "http://127.0.0.1:9", "--max-level", "0", "--out", str(tmp_path))
    assert out.returncode == 2 and out.stderr.startswith("loadgen onset: error: --max-level 0")
    out = onset_cli(str(scenario(tmp_path, baseline=0)), "--host", "http://127.0.0.1:9", "--out", str(tmp_path / "o"))
    assert out.returncode == 2 and "sweep.baseline" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "o").exists()
