"""Background traffic end to end against the embedded engine: streamed answers carry token counts."""

from __future__ import annotations

from pathlib import Path

import orjson

from collectors.jsonl import read_jsonl
from loadgen.core.request import RunRequest
from loadgen.studies.run import run

SCENARIO = """
name = "background"
[[canaries]]
id = "c"
prompt = "The history of the old harbour town begins with"
max_tokens = 4
[background]
prompt_words = [4, 12]
max_tokens = [2, 6]
stream = {stream}
[sweep]
levels = [2]
canaries_per_level = 3
warmup = 0
baseline = 0
"""


def test_streamed_and_whole_background_rows_carry_token_counts(engine_url: str, tmp_path: Path) -> None:
    for stream in ("true", "false"):
        scenario = tmp_path / f"s-{stream}.toml"
        scenario.write_text(SCENARIO.format(stream=stream))
        result = run(RunRequest(scenario, host=engine_url, out_dir=tmp_path / "runs"))
        assert result.status == "finished"
        manifest = orjson.loads((result.run_dir / "manifest.json").read_bytes())
        assert manifest["features"]["completions"]["features"]["include_usage"]  # the engine honours it
        rows = [r for r in read_jsonl(result.run_dir / "background.jsonl").rows if r["status"] == "ok"]
        assert rows and all(2 <= r["completion_tokens"] <= 6 and r["prompt_tokens"] >= 4 for r in rows), stream
        report = orjson.loads((result.run_dir / "report.json").read_bytes())
        level = next(b for b in report["background"] if b["concurrency"] == 2)
        assert level["completion_tokens"] == sum(r["completion_tokens"] for r in rows if r["level"] == 2)
