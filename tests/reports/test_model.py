"""reports.model.report names exactly what a report holds: every key ``build_report`` writes is in the model with
its type, every required key is written, and so for ``comparison.json``. mypy checks the code against the
model; this checks the model against the JSON, so a key added through a plain dict cannot slip past it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from collectors.client_cpu import ClientCpuSample, ClientCpuWriter, client_cpu_path
from collectors.read.runfolder import load_run
from reports.analysis.build import build_report
from reports.compare.runs import compare_reports
from reports.model.comparison import Comparison
from reports.model.conform import problems
from reports.model.report import Report, is_report
from tests.reports.runkit import rec, write_run

GOLDEN = Path(__file__).parent / "golden"


def conforms(value: Any, tp: Any, where: str) -> list[str]:
    """Where ``value`` (decoded JSON) departs from the type ``tp`` of ``reports.model.report``, keys the model lacks
    included (``reports.model.conform.problems``, strict)."""
    return problems(value, tp, where, strict=True)


def full_run(tmp_path: Path) -> Path:
    """A run that fills the optional parts: client CPU samples, a cache expectation, server settings,
    a level ended by the claim rule, divergences with logprobs and background rows."""
    records = [rec([1, 2, 3], phase="baseline"), rec([1, 2, 3], phase="baseline")]
    records += [rec([1, 2, 3], level=lv) for lv in (0, 2) for _ in range(3)]
    records += [rec([1, 9, 3], level=2), rec(None, level=2, status="error", error_kind="http_status")]
    records += [rec([4, 5], canary="warm", level=lv, cached_tokens=3) for lv in (0, 2)]
    background = [
        {"level": 2, "sent_at": 1_700_000_000.0 + i, "latency_s": 1.0, "status": "ok", "completion_tokens": 8}
        for i in range(3)
    ]
    run_dir = write_run(
        tmp_path / "run",
        records,
        levels=[0, 2],
        extra={"background.jsonl": background},
        scenario={"name": "t", "canaries": [{"id": "c0"}, {"id": "warm", "expect_cache": "hit", "cache": "keep"}]},
        server={"version": "1.0", "config": {"settings": {"prefix_caching": True, "block_size": 16}}},
        levels_ended_by_claim=[{"level": 2, "completed": 5, "quota": 8, "canary": "c0", "diverged": 1, "reason": "x"}],
    )
    writer = ClientCpuWriter(client_cpu_path(run_dir, ""))
    for i, level in enumerate((0, 2)):
        writer.write(ClientCpuSample("pid1", 1, 1000.0 + i, 1001.0 + i, 0.5, level, "sweep", 0.1))
    writer.close()
    return run_dir


def reports(tmp_path: Path) -> dict[str, Any]:
    found: dict[str, Any] = {p.name: orjson.loads(p.read_bytes()) for p in sorted(GOLDEN.glob("*.report.json"))}
    found["full"] = orjson.loads(orjson.dumps(build_report(load_run(full_run(tmp_path)))))
    return found


def test_every_report_key_is_in_the_model_with_its_type(tmp_path: Path) -> None:
    built = reports(tmp_path)
    full = built["full"]
    assert "client_load" in full and full["scenario_checks"]["cache_expectations"]["warm"]["expect"] == "hit"
    assert full["run"]["server_config"]["block_size"] == 16 and full["run"]["levels_ended_by_claim"]
    for name, report in built.items():
        assert is_report(report)
        assert conforms(report, Report, name) == []


def test_a_comparison_conforms_too(tmp_path: Path) -> None:
    built = reports(tmp_path)
    first = next(iter(built))
    cmp = compare_reports([(n, r) for n, r in built.items()], {n: first for n in built})  # references too
    assert cmp["references"] and conforms(orjson.loads(orjson.dumps(cmp)), Comparison, "comparison") == []


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda r: r["canaries"][0]["levels"][0].update(surprise=1), "levels[0].surprise: not in Level"),
        (lambda r: r["run"].pop("notices"), "run.notices: required by RunSection, missing"),
        (lambda r: r["canaries"][0]["overall"].update(errors="2"), "overall.errors: '2', expected an integer"),
    ],
)
def test_the_walker_fails_on_what_the_model_does_not_say(change: Any, says: str) -> None:
    report = orjson.loads((GOLDEN / "single.report.json").read_bytes())
    change(report)
    assert any(says in problem for problem in conforms(report, Report, "single"))
