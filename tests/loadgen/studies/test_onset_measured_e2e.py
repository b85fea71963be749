"""``loadgen onset`` finds the onset an endpoint has by construction, whatever its timing class.

``timing_server.py --diverge-at 3`` changes a completion's last token when the median of the OTHER requests the
server had in flight over the request's life was at least 3: the onset is 3 other requests. Through the real
CLI (``python -m loadgen onset``, each level asked a real run), for each timing class (answers in one piece
after a fixed or a random delay, token-by-token streams, non-streamed answers) the search finds onset 3 with 2
the highest clean level. The search is keyed by what each canary measured (the report's co-residency: the
server has no ``/metrics``, so the client's own count of its requests in flight), so each canary's ``diverged``
in ``onset.json`` is the server's own verdict for it, and every measured level the search calls divergent is
3 or more and every clean one below 3. Each class is a test class, so pytest-xdist's ``loadscope`` runs them
side by side.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from tests.loadgen.serve_app import script_server
from tests.loadgen.timing_classes import PLAIN, PROMPT, SERVER, TOKENS, WHOLE_FIXED, WHOLE_RANDOM, Timing, scenario_text

K = 3


def scenario(tmp_path: Path, timing: Timing) -> Path:
    """The band tests' scenario of the class (its level list is the onset's to set): a baseline of one, two
    canaries a level."""
    path = tmp_path / "onset.toml"
    path.write_text(scenario_text(timing, [0], canaries_per_level=2, baseline=1))
    return path


def check_onset(tmp_path: Path, timing: Timing) -> None:
    with script_server(SERVER, *timing.server_args, "--diverge-at", str(K)) as url:
        args = [
            "onset",
            str(scenario(tmp_path, timing)),
            "--host",
            url,
            "--max-level",
            "4",
            "--out",
            str(tmp_path / "o"),
            "--quiet",
        ]
        out = subprocess.run(
            [sys.executable, "-m", "loadgen", *args],
            capture_output=True,
            text=True,
            timeout=300,
        )
        with urllib.request.urlopen(f"{url}/_log") as resp:
            lives = [e for e in orjson.loads(resp.read()) if e["tag"].startswith(PROMPT)]
    assert out.returncode == 0, out.stdout + out.stderr
    study = Path(out.stdout.strip().splitlines()[-1])
    data: dict[str, Any] = orjson.loads((study / "onset.json").read_bytes())
    assert (data["onset_level"], data["highest_clean_level"], data["decided"]) == (K, K - 1, True), data
    assert f"onset: level {K} (highest clean level {K - 1})" in out.stdout
    for measured, verdict in data["results_by_measured_level"].items():
        assert verdict == ("divergent" if int(measured) >= K else "clean"), data["results_by_measured_level"]

    # each sweep canary's verdict in onset.json is the server's own: canaries go one at a time, in order
    by_id = {m["request_id"]: m for entry in data["levels"] for m in entry["measured"]}
    records = []
    for entry in data["levels"]:
        for path in sorted((study / entry["run_dir"]).glob("canaries*.jsonl")):
            records += [orjson.loads(line) for line in path.read_bytes().splitlines()]
    records.sort(key=lambda r: r["sent_at"])
    assert len(records) == len(lives) == data["canaries"]
    for record, life in zip(records, lives, strict=True):
        if record["phase"] == "sweep":
            canary = by_id[record["request_id"]]
            assert canary["diverged"] == life["diverged"], (record["level"], canary, life["others_seconds"])
            assert canary["measured_level"] is not None


class TestWholeFixed:
    def test_onset_is_three(self, tmp_path: Path) -> None:
        check_onset(tmp_path, WHOLE_FIXED)


class TestWholeRandom:
    def test_onset_is_three(self, tmp_path: Path) -> None:
        check_onset(tmp_path, WHOLE_RANDOM)


class TestTokens:
    def test_onset_is_three(self, tmp_path: Path) -> None:
        check_onset(tmp_path, TOKENS)


class TestPlain:
    def test_onset_is_three(self, tmp_path: Path) -> None:
        check_onset(tmp_path, PLAIN)
