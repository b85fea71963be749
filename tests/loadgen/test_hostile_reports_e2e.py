"""End to end through the real CLI: what a hostile endpoint sends never stops a report and never
reaches ``report.md`` or ``comparison.md`` raw. Each run is a real ``loadgen run``; ``report``, ``check``,
``export`` and ``compare`` on its folder are called in this process.

``fault_server.py``: ``hostile-numbers`` answers logprobs of ±1.7e308 and alternatives' logprobs
``"NaN"``, ``"-Infinity"``, ``"Infinity"`` (stored as null); under ``/evil`` the model id is Markdown and
HTML with terminal escapes, and ``escapes`` completions fork at a token holding ESC, an OSC title, BEL
and NUL.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import orjson
import pyarrow.parquet as pq

from tests.loadgen.cli.clikit import loadgen, loadgen_run

NUMBERS = """
name = "numbers"
[endpoint]
base_url = "{url}"
[[canaries]]
id = "numbers"
prompt = "hostile-numbers"
[[canaries]]
id = "fine"
prompt = "ok"
[sweep]
levels = [0]
canaries_per_level = 2
warmup = 0
baseline = 1
"""

EVIL = """
name = "evil"
[endpoint]
base_url = "{url}/evil"
[[canaries]]
id = "escapes"
prompt = "escapes"
[sweep]
levels = [0]
canaries_per_level = 4
warmup = 0
baseline = 1
"""


def run_scenario(tmp_path: Path, text: str) -> Path:
    done = loadgen_run(text, tmp_path / "runs")
    assert done.returncode == 0, done.stdout + done.stderr
    return done.run_dir


def test_nan_and_huge_logprobs_are_skipped_counted_and_every_command_works(fault_server: str, tmp_path: Path) -> None:
    run_dir = run_scenario(tmp_path, NUMBERS.format(url=fault_server))
    assert {"report.json", "report.md", "report.html"} <= {p.name for p in run_dir.iterdir()}
    raw = (run_dir / "canaries.jsonl").read_bytes()
    assert b'["Hello",null]' in raw and b"1.7e+308" in raw  # what the endpoint sent, kept as it came

    report = orjson.loads((run_dir / "report.json").read_bytes())
    health = report["health"]
    # per record: 2 logprobs of +-1.7e308, 3 alternatives NaN/-inf/+inf, 2 of +-1.7e308; 3 records
    assert (health["unusable_numbers"], health["records_with_unusable_numbers"]) == (21, 3)
    notice = next(n for n in report["run"]["notices"] if "21 numbers in 3 records" in n)
    assert "left out of every figure and chart" in notice
    assert (
        notice in (run_dir / "report.md").read_text()
        and "21 numbers in 3 records" in (run_dir / "report.html").read_text()
    )
    numbers = next(c for c in report["canaries"] if c["id"] == "numbers")
    assert numbers["overall"]["unique_completions"] == 1 and numbers["overall"]["completions"] == 2

    again = loadgen("report", str(run_dir))
    assert again.returncode == 0, again.stderr
    gate = loadgen("check", str(run_dir), "--max-unique", "1", "--max-divergence-rate", "0@each")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    exported = loadgen("export", str(run_dir), "--out", str(tmp_path / "exp"))
    assert exported.returncode == 0, exported.stderr
    rows = list(csv.DictReader((tmp_path / "exp" / "canaries.csv").open()))
    assert len(rows) == 6 and pq.read_table(tmp_path / "exp" / "canaries.parquet").num_rows == 6


def test_server_text_is_escaped_in_report_md_and_comparison_md(fault_server: str, tmp_path: Path) -> None:
    run_dir = run_scenario(tmp_path, EVIL.format(url=fault_server))
    cmp = loadgen("compare", str(run_dir), str(run_dir), "--out", str(tmp_path / "cmp"))
    assert cmp.returncode == 0, cmp.stderr
    for path in (run_dir / "report.md", tmp_path / "cmp" / "comparison.md"):
        data = path.read_bytes()
        assert not any(c in data for c in (b"\x1b", b"\x07", b"\x00")), path  # no terminal escape, raw
        md = data.decode()
        assert r"\\x1b\]0;owned\\x07\\x00" in md  # the model id's escapes, shown (as prose: \x1b]0;owned\x07\x00)
        assert not any(line.startswith("# pwned") for line in md.splitlines()), path  # no heading injected
        assert "![t](" not in md  # no remote image
    md = (run_dir / "report.md").read_text()
    model_line = next(line for line in md.splitlines() if line.startswith("Model "))
    # prose: every character that opens markup is backslash-escaped, so no raw HTML, no code span break-out
    assert "\\<img src=x onerror=alert(1)\\>" in model_line and "m\\`\\</code\\>" in model_line
    assert all(model_line[i - 1] == "\\" for i, c in enumerate(model_line) if c in "<>`[]")
    # the fork's tokens, in code spans with the escapes visible
    assert "| 1 | `\\x1b[2J\\x00` | `\\x1b]0;owned\\x07` | 2 |" in md


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]")  # C0 but line feed and tab, DEL, C1, a bidi override


def test_server_text_reaches_report_html_and_comparison_html_without_control_bytes(
    fault_server: str, tmp_path: Path
) -> None:
    """The model id's and the forked tokens' escapes (ESC, an OSC title, BEL, NUL) are shown, not carried."""
    run_dir = run_scenario(tmp_path, EVIL.format(url=fault_server))
    cmp = loadgen("compare", str(run_dir), str(run_dir), "--out", str(tmp_path / "cmp"))
    assert cmp.returncode == 0, cmp.stderr
    for path in (run_dir / "report.html", tmp_path / "cmp" / "comparison.html"):
        page = path.read_text(encoding="utf-8")
        assert not (found := CONTROL.findall(page)), (path, found[:5])
        assert r"\x1b]0;owned\x07\x00" in page, path  # the model id's escapes, visible
        assert "<img src=x" not in page  # markup escaped, as before


BIG_CONFIG = """
name = "bigconfig"
[endpoint]
base_url = "{url}/bigconfig"
[[canaries]]
id = "plain"
prompt = "ok"
[sweep]
levels = [0]
canaries_per_level = 1
warmup = 0
baseline = 1
"""


def test_server_stated_settings_are_capped_as_info_series_are(fault_server: str, tmp_path: Path) -> None:
    """A 20 MB ``dtype`` in ``/server_info`` is kept as its first characters: the manifest and the report stay
    small, and the settings stated beside it are read as before."""
    run_dir = run_scenario(tmp_path, BIG_CONFIG.format(url=fault_server))
    for name in ("manifest.json", "report.json", "report.html", "report.md"):
        assert (run_dir / name).stat().st_size < 1024 * 1024, name
    settings = orjson.loads((run_dir / "manifest.json").read_bytes())["server"]["config"]["settings"]
    assert settings["dtype"].startswith("bfloat16xxx") and len(settings["dtype"]) <= 250
    assert (
        settings["attention_backend"].startswith("\x1b]0;owned\x07FLASH") and len(settings["attention_backend"]) <= 250
    )
    assert (settings["prefix_caching"], settings["block_size"], settings["enforce_eager"]) == (True, 16, False)


ODD_ANSWERS = """
name = "odd-answers"
[endpoint]
base_url = "{url}"
[[canaries]]
id = "more-ids"
prompt = "more-ids"
{usage}
[sweep]
levels = [0]
canaries_per_level = 1
warmup = 0
baseline = 1
"""
USAGE = ("negative", "huge", "string", "cached")


def test_more_ids_than_tokens_and_impossible_usage_are_noticed(fault_server: str, tmp_path: Path) -> None:
    """Answers that parse but cannot be true are kept (their tokens are compared as sent) and said: one notice
    for token ids beyond the tokens, one for usage no engine reports (a negative count, 1e15, a string,
    cached tokens above the prompt), each with how many records, in report.json, report.md and report.html."""
    usage = "".join(f'[[canaries]]\nid = "usage-{k}"\nprompt = "usage:{k}"\n' for k in USAGE)
    run_dir = run_scenario(tmp_path, ODD_ANSWERS.format(url=fault_server, usage=usage))
    report = orjson.loads((run_dir / "report.json").read_bytes())
    assert all(c["overall"]["completions"] == 1 for c in report["canaries"])  # kept and compared
    notices = report["run"]["notices"]
    ids = [n for n in notices if "more token ids than tokens" in n]
    odd = [n for n in notices if "impossible usage" in n]
    assert len(ids) == 1 and "2 records" in ids[0], notices
    assert len(odd) == 1 and "8 records" in odd[0], notices
    md, page = (run_dir / "report.md").read_text(), (run_dir / "report.html").read_text()
    assert "more token ids than tokens" in md and "impossible usage" in md
    assert "more token ids than tokens" in page and "impossible usage" in page


def test_progress_counts_every_record_of_a_hostile_answer(fault_server: str, tmp_path: Path) -> None:
    """Live progress reads the records the run writes: an alternative's logprob the server sent as ``"NaN"``
    (written as null) is still a record, so the last progress line counts every canary written."""
    out = loadgen_run(NUMBERS.format(url=fault_server), tmp_path / "runs")
    assert out.returncode == 0, out.stdout + out.stderr
    written = sum(len(p.read_text().splitlines()) for p in out.run_dir.glob("canaries*.jsonl"))
    assert written == 6
    done = next(line for line in out.stderr.splitlines() if line.startswith("load done:"))
    assert done.startswith(f"load done: {written}/{written} canaries"), out.stderr


# NUMBERS with its first canary asking the fault server for an answer claiming a batch size
BATCH_SIZES = NUMBERS.replace('name = "numbers"', 'name = "batchsizes"').replace(
    'id = "numbers"\nprompt = "hostile-numbers"', 'id = "claims"\nprompt = "batch-sizes:{size}"'
)


def test_a_batch_size_no_engine_runs_is_a_malformed_answer_not_the_exact_co_residency(
    fault_server: str, tmp_path: Path
) -> None:
    """``x_batch_sizes`` is taken as the truth of what a canary shared; 2^40 sequences in one step is no batch."""
    for size, ok in ((1 << 20, True), ((1 << 20) + 1, False), (1 << 40, False), (1 << 62, False)):
        (tmp_path / str(size)).mkdir()
        run_dir = run_scenario(tmp_path / str(size), BATCH_SIZES.format(url=fault_server, size=size))
        lines = (run_dir / "canaries.jsonl").read_bytes().splitlines()
        records = [r for r in map(orjson.loads, lines) if r["canary_id"] == "claims"]
        assert len(records) == 3
        source = orjson.loads((run_dir / "report.json").read_bytes())["run"]["witness"]["source"]
        if ok:  # the bound itself is a batch size: kept, and the report's truth
            assert all(r["status"] == "ok" and r["engine_batch_sizes"] == [size] * 3 for r in records)
            assert source == "engine_batch_sizes"
            continue
        assert all(r["status"] == "error" and r["error_kind"] == "malformed_body" for r in records), records
        assert all("x_batch_sizes" in r["error_message"] and r["engine_batch_sizes"] is None for r in records)
        assert source != "engine_batch_sizes"
