"""Endpoints that break one seed contract each, through ``loadgen run --host`` and ``loadgen check``.

The server (``tests/loadgen/seed_server.py``) samples by its seed on ``/v1/completions``, chat and SGLang's
``/generate``; ``--break`` breaks one promise: the chat route ignores the seed, an ``n``-choice request's choices
are all the same, or ``/generate`` gives other tokens than completions for one seed. One scenario runs against
each: a seeds set over the three routes and an ``n = 3`` canary, at levels 0 and 2. Each test asserts that the
broken contract is reported where it broke (route, canary, level) with its exact count, that the contracts the
server keeps are reported kept, and that only the gate on the broken one fails: a tool that flagged nothing, or
everything, or the wrong route, fails here. The honest server keeps every contract and passes every gate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tests.loadgen.cli.clikit import Ran, loadgen, loadgen_run
from tests.loadgen.serve_app import script_server

SERVER = Path(__file__).parents[1] / "loadgen" / "seed_server.py"
LEVELS = [0, 2]
PER_LEVEL = 2
SCENARIO = f"""
name = "seeds"
[endpoint]
kind = "completions"
[[canaries]]
id = "roll"
prompt = "a rollout"
max_tokens = 8
temperature = 1.0
stream = false
seeds = [11, 12]
routes = ["completions", "chat", "generate"]
[[canaries]]
id = "group"
prompt = "a group"
max_tokens = 8
temperature = 1.0
stream = false
seed = 5
n = 3
[background]
stream = false
max_tokens = [8, 8]
[sweep]
levels = {LEVELS}
canaries_per_level = {PER_LEVEL}
warmup = 0
baseline = 1
settle_timeout_s = 5
"""
GATES = {
    "seed-mismatch": "0@each",
    "seed-collision": "0@each",
    "duplicate-choices": "0@each",
    "route-mismatch": "0@each",
}


@dataclass(frozen=True)
class Seen:
    """What a person sees of one run: its folder, report.json, report.md, and the run's own summary lines."""

    run_dir: Path
    report: dict[str, Any]
    md: str
    said: list[str]

    def html_rows(self, warn: bool) -> list[str]:
        """report.html's seed contract rows, marked broken (``warn``) or not, as their cells' text."""
        html = (self.run_dir / "report.html").read_text()
        table = html[html.index("<h2>Seed contracts</h2>") :].split("</table>")[0]
        rows = table.split("<tr")[2:]
        return [re.sub("<[^>]+>", "|", r) for r in rows if r.startswith(' class="warn"') == warn]


def _run(tmp_path: Path, mode: str) -> Seen:
    with script_server(SERVER, "--break", mode) as url:
        done = loadgen_run(SCENARIO, tmp_path / "runs", "--host", url)
    assert done.returncode == 0, done.stderr[-3000:]
    report = orjson.loads((done.run_dir / "report.json").read_bytes())
    said = [line for line in done.stdout.splitlines() if line.startswith("Seed contract")]
    return Seen(done.run_dir, report, (done.run_dir / "report.md").read_text(), said)


def _check(run_dir: Path, *gates: str) -> Ran:
    args = [a for g in gates for a in (f"--max-{g}", GATES[g])]
    return loadgen("check", str(run_dir), "--allow-unmeasured-levels", *args)


def _failed(done: Ran) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.startswith("FAIL")]


def _counts(block: dict[str, Any]) -> list[tuple[int | None, int, int]]:
    return [(lv["concurrency"], lv["k"], lv["n"]) for lv in [block["baseline"], *block["levels"]]]


def _seed_sets(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {b["route"]: b for b in report["seed_contracts"]["seeds"]}


def _kept_same_seed(report: dict[str, Any]) -> None:
    same = report["seed_contracts"]["same_seed"]
    assert len(same) == 9  # 2 seeds x 3 routes, 3 choices
    assert all(lv["k"] == 0 and lv["n"] == PER_LEVEL for b in same for lv in b["levels"]), same


def _md_row(md: str, contract: str, subject: str) -> str:
    (row,) = [line for line in md.splitlines() if line.startswith(f"| {contract} | {subject} ")]
    return row


def test_honest_server_keeps_every_seed_contract(tmp_path: Path) -> None:
    seen = _run(tmp_path, "none")
    run_dir, report = seen.run_dir, seen.report
    _kept_same_seed(report)
    assert seen.said == ["Seed contracts held: none of 15 broken at any level."]
    assert len(seen.html_rows(warn=False)) == 15 and not seen.html_rows(warn=True)
    for route, block in _seed_sets(report).items():
        assert block["verdict"].startswith(f"seeds honoured on {route}"), block
    (choices,) = report["seed_contracts"]["choices"]
    assert _counts(choices) == [(None, 0, 3), (0, 0, 3 * PER_LEVEL), (2, 0, 3 * PER_LEVEL)]
    assert all(r["differing"] == [] and r["compared"] == ["generate"] for r in report["seed_contracts"]["routes"])
    done = _check(run_dir, *GATES)
    assert done.returncode == 0, done.stdout[-3000:]
    assert not _failed(done)


def test_seed_ignored_on_chat_is_named_and_fails_the_collision_gate(tmp_path: Path) -> None:
    seen = _run(tmp_path, "chat-seed")
    run_dir, report, md = seen.run_dir, seen.report, seen.md
    _kept_same_seed(report)  # one seed is still one completion on every route: only the seeds set shows it
    sets = _seed_sets(report)
    assert sets["chat"]["verdict"].startswith("seed ignored on chat"), sets["chat"]
    assert _counts(sets["chat"]) == [(None, 2, 2), (0, 2 * PER_LEVEL, 2 * PER_LEVEL), (2, 2 * PER_LEVEL, 2 * PER_LEVEL)]
    for route in ("completions", "generate"):
        assert sets[route]["verdict"].startswith(f"seeds honoured on {route}")
        assert all(k == 0 for _, k, _ in _counts(sets[route]))
    assert "seed ignored on chat" in _md_row(md, "different seeds, same completion", "roll on chat")
    assert "seeds honoured" in _md_row(md, "different seeds, same completion", "roll on completions")
    (said,) = seen.said
    assert said.startswith("Seed contract broken: different seeds, same completion: roll on chat: 8/8 = 100.0%")
    (row,) = seen.html_rows(warn=True)
    assert "|roll on chat|" in row and "seed ignored on chat" in row, row

    done = _check(run_dir, *GATES)
    assert done.returncode == 1
    failed = _failed(done)
    assert len(failed) == len(LEVELS), done.stdout
    assert all("roll on chat concurrency" in line and "max-seed-collision 0" in line for line in failed), failed
    assert _check(run_dir, "seed-mismatch", "duplicate-choices", "route-mismatch").returncode == 0


def test_duplicate_choices_are_counted_per_level_and_fail_their_gate(tmp_path: Path) -> None:
    seen = _run(tmp_path, "duplicate-choices")
    run_dir, report, md = seen.run_dir, seen.report, seen.md
    (choices,) = report["seed_contracts"]["choices"]
    # each request's choices 1 and 2 repeat its choice 0: 2 of every 3
    assert _counts(choices) == [(None, 2, 3), (0, 2 * PER_LEVEL, 3 * PER_LEVEL), (2, 2 * PER_LEVEL, 3 * PER_LEVEL)]
    assert choices["verdict"].startswith("duplicate choices"), choices
    assert all(b["verdict"].startswith("seeds honoured") for b in report["seed_contracts"]["seeds"])
    row = _md_row(md, "n choices, duplicates", "group")
    assert f"0: {2 * PER_LEVEL}/{3 * PER_LEVEL} = 66.7%" in row and "duplicate choices" in row, row
    assert [line.split(": 8/12")[0] for line in seen.said] == [
        "Seed contract broken: n choices, duplicates: group (n = 3)"
    ], seen.said
    (html_row,) = seen.html_rows(warn=True)
    assert "|group (n = 3)|" in html_row and "duplicate choices" in html_row, html_row

    done = _check(run_dir, *GATES)
    assert done.returncode == 1
    failed = _failed(done)
    assert len(failed) == len(LEVELS), done.stdout
    assert all("group concurrency" in line and "max-duplicate-choices 0" in line for line in failed), failed
    assert _check(run_dir, "seed-mismatch", "seed-collision", "route-mismatch").returncode == 0


def test_generate_route_mismatch_is_named_and_fails_the_route_gate(tmp_path: Path) -> None:
    seen = _run(tmp_path, "generate-route")
    run_dir, report, md = seen.run_dir, seen.report, seen.md
    _kept_same_seed(report)  # each route is self-consistent: only comparing the routes shows it
    routes = report["seed_contracts"]["routes"]
    assert sorted(r["seed"] for r in routes) == [11, 12]
    for block in routes:
        assert block["differing"] == ["generate"], block
        assert _counts(block) == [(None, 1, 1), (0, PER_LEVEL, PER_LEVEL), (2, PER_LEVEL, PER_LEVEL)]
        row = _md_row(md, "one seed, other route", f"roll seed {block['seed']}")
        assert "differing: generate" in row, row
    assert [line.split(" (completions")[0] for line in seen.said] == [
        "Seed contract broken: one seed, other route: roll seed 11",
        "Seed contract broken: one seed, other route: roll seed 12",
    ], seen.said
    assert len(seen.html_rows(warn=True)) == 2

    done = _check(run_dir, *GATES)
    assert done.returncode == 1
    failed = _failed(done)
    assert len(failed) == 2 * len(LEVELS), done.stdout
    assert all("max-route-mismatch 0" in line for line in failed), failed
    assert _check(run_dir, "seed-mismatch", "seed-collision", "duplicate-choices").returncode == 0
