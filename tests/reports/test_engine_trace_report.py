"""``loadgen report RUN --engine-trace FILE``: a trace from an engine the tool did not start, joined to the run.

A hand-made run folder (``tests.reports.runkit``) and a scripted engine trace (``tests.reports.tracekit``) with a
known truth: the records whose decode met another request's prefill drifted there; the others never did.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loadgen.cli.main import main
from tests.reports.runkit import rec, write_run
from tests.reports.tracekit import Engine, ids_of

IDS = [5, 6, 7, 8, 9, 10]
LP = [-0.5] * 6


def _run(tmp_path: Path) -> tuple[Path, Path]:
    keys = ids_of(7)
    bg = ids_of(8)[7]
    records = [rec(IDS, phase="baseline", level=0, request_id=keys[0], logprobs=LP, sent_at=1.0)]
    eng = Engine(tmp_path / "engine_steps-vllm-gpu0-77.jsonl", source="vllm")
    eng.step([(keys[0], 0, 12, 12)])
    for j in range(1, 6):
        eng.step([(keys[0], 11 + j, 1, 12)])
    for r, key in enumerate(keys[1:]):
        drifts = r < 3  # records 1-3 meet a prefill at position 2
        lp = [-0.5, -0.5, -0.4999, -0.4, -0.4, -0.4] if drifts else LP
        ids = [5, 6, 7, 8, 99, 10] if r == 0 else IDS  # record 1 also flips at position 4
        records.append(rec(ids, phase="sweep", level=2, request_id=key, logprobs=lp, sent_at=10.0 + r))
        eng.step([(key, 0, 12, 12)])
        for j in range(1, 6):
            prefill = drifts and j == 2
            eng.step([(key, 11 + j, 1, 12), (bg, 0, 40, 40) if prefill else (bg, 40 + j, 1, 40)])
    eng.writer.close()
    return write_run(tmp_path / "run", records, levels=[2]), eng.writer.path


def test_a_brought_trace_is_copied_in_joined_and_names_the_step_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, trace = _run(tmp_path)
    assert main(["report", str(run), "--engine-trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "c0: why: Drift followed the step kind: all 3 first drifts" in out
    assert (run / "engine_steps-brought-vllm-gpu0-77.jsonl").read_bytes() == trace.read_bytes()
    report = orjson.loads((run / "report.json").read_bytes())
    (canary,) = report["canaries"]
    block = canary["engine_steps"]
    assert (block["source"], block["records"], block["joined"], block["drifted"]) == ("vllm", 7, 7, 3)
    kinds = {r["value"]: (r["positions"], r["drifts"]) for r in block["factors"][0]["rows"]}
    assert kinds == {"decode-only": (4 * 5 + 3 * 1, 0), "decode beside prefills": (3, 3), "prefill-only": (7, 0)}
    first = block["drifts"][0]
    assert (first["first_drift"], first["first_flip"]) == (2, 4)
    assert first["drift_step"] == {"row": "decode", "kind": "mixed", "requests": 2, "tokens": 41}
    assert first["flip_step"]["kind"] == "decode-only"
    level = canary["levels"][0]
    assert level["co_residency"]["source"] == "engine_trace"
    assert (level["co_residency"]["min"], level["co_residency"]["max"]) == (0, 1)  # alone in its prefill step
    assert report["run"]["engine_trace"]["records_joined"] == 7
    assert report["run"]["witness"]["source"] == "engine_trace"
    md = (run / "report.md").read_text()
    html = (run / "report.html").read_text()
    assert "Why it diverged (engine steps):" in md and "| decode beside prefills | 3 | 3 | 100.0% |" in md
    assert "<h3>Why it diverged</h3>" in html and "others&#x27; prefills" in html
    # the copy stays: a later report without the flag joins it again
    assert main(["report", str(run), "--quiet"]) == 0
    again = orjson.loads((run / "report.json").read_bytes())
    assert again["canaries"][0]["engine_steps"] == block


def test_a_trace_that_names_no_record_says_so_and_a_missing_file_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, _ = _run(tmp_path)
    other = Engine(tmp_path / "other.jsonl")
    other.step([(ids_of(20)[19], 0, 4, 4)])
    other.writer.close()
    assert main(["report", str(run), "--engine-trace", str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "loadgen report: error: --engine-trace" in err and "missing.jsonl: no such file" in err
    assert not list(run.glob("engine_steps*"))
    assert main(["report", str(run), "--quiet", "--engine-trace", str(other.writer.path)]) == 0
    report = orjson.loads((run / "report.json").read_bytes())
    assert any("no step names a canary record's request id" in n for n in report["run"]["notices"])
    assert report["canaries"][0]["engine_steps"]["joined"] == 0
