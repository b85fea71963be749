"""End to end through the real CLI on the embedded engine: ``python -m loadgen run`` twice (default and
``--batch-invariant``), then ``report`` and ``compare`` (in this process): fork classes, the drift heatmap, the
first-divergence and gap pictures, and the cost rows and frontier are present and agree with each other."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from tests.loadgen.cli.clikit import loadgen, loadgen_run

SCENARIO = """
name = "forks-e2e"
[[canaries]]
id = "story"
prompt = "The history of the old harbour town begins with"
max_tokens = 64
[sweep]
levels = [0, 8]
canaries_per_level = 6
warmup = 1
baseline = 2
"""


def _run(tmp_path: Path, name: str, *engine: str) -> Path:
    done = loadgen_run(SCENARIO, tmp_path / name, *[f"--engine-arg={a}" for a in engine], timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.run_dir


def _svgs(html: str) -> list[str]:
    svgs = html.split("<svg")[1:]
    return ["<svg" + s.split("</svg>")[0] + "</svg>" for s in svgs]


def _check_entry(entry: dict[str, Any]) -> None:
    for block in [entry["overall"], *entry["levels"]]:
        classes = block["fork_classes"]
        assert sum(classes.values()) == block["diverged"], block
    hist = entry["fork_gaps"]["histogram"]
    classified = entry["overall"]["fork_classes"]["near_tie"] + entry["overall"]["fork_classes"]["structural"]
    assert sum(b["count"] for b in hist) == classified
    for f in entry["forks"]:
        if f["class"] != "unclassified":
            near = f["gap_steps"] <= entry["fork_gaps"]["near_tie_steps"]
            assert f["class"] == ("near_tie" if near else "structural")
    hm = entry["drift_heatmap"]
    assert hm["levels"] == [0, 8] and hm["positions"] <= entry["reference"]["length"]
    assert hm["max"][0] == [0.0] * len(hm["max"][0])  # alone, the canary's logprobs never move


def test_forks_pictures_and_cost_through_the_cli(tmp_path: Path) -> None:
    default = _run(tmp_path, "default")
    invariant = _run(tmp_path, "invariant", "--batch-invariant")
    assert loadgen("report", str(default)).returncode == 0
    report = json.loads((default / "report.json").read_text())
    entry = report["canaries"][0]
    _check_entry(entry)
    html = (default / "report.html").read_text()
    for svg in _svgs(html):
        ET.fromstring(svg)
    assert "Logprob drift by position" in html
    diverged = entry["overall"]["diverged"]
    assert ("First divergence position, per level" in html) == (diverged > 0)
    assert ("Fork gaps: reference top-1" in html) == (entry["overall"]["fork_classes"]["unclassified"] < diverged)
    md = (default / "report.md").read_text()
    assert ("| overall | " + str(diverged)) in md or diverged == 0
    inv = json.loads((invariant / "report.json").read_text())["canaries"][0]
    _check_entry(inv)
    assert inv["overall"]["diverged"] == 0  # batch-invariant: one completion, nothing to classify

    out = tmp_path / "cmp"
    done = loadgen("compare", str(default), str(invariant), "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    cmp = json.loads((out / "comparison.json").read_text())
    assert cmp["frontier"] is True and [r["batch_invariant"] for r in cmp["runs"]] == [False, True]
    bg = {b["concurrency"]: b for b in report["background"]}
    rows = {lv["concurrency"]: lv["runs"] for lv in cmp["canaries"][0]["cost"]}
    assert rows[8][0]["background_tokens_per_s"] == bg[8]["tokens_per_s"] > 0
    assert bg[8]["tokens_per_s"] == bg[8]["completion_tokens"] / bg[8]["wall_s"]
    assert rows[8][1]["background_tokens_per_s"] > 0 and rows[0][0]["background_tokens_per_s"] is None
    assert rows[8][0]["divergence_rate"] == entry["levels"][1]["divergence_rate"]
    assert rows[8][0]["canary_latency_p99"] == entry["levels"][1]["latency_s"]["p99"]
    chtml = (out / "comparison.html").read_text()
    assert "Cost vs divergence (frontier)" in chtml
    for svg in _svgs(chtml):
        ET.fromstring(svg)
    assert "Cost beside determinism" in (out / "comparison.md").read_text()
