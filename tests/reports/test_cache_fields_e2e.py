"""End to end through the real CLI: a server whose ``cached_tokens`` lies, one case each (analysis.cache_fields).

Each case is a real ``loadgen run`` against ``tests/loadgen/kv_source_server.py`` (a small aiohttp server answering
completions with a chosen ``usage.prompt_tokens_details.cached_tokens`` and ``/metrics`` with chosen by-source
counters, and writing an engine step trace with ``local``/``external``), then the notice in report.json and
report.md, naming the field and the canary. The engine's own word comes from its step trace (brought with
``loadgen report --engine-trace``) or, where the collector reads the by-source series, from its counters alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from reports.model.conform import problems
from reports.model.report import Report
from tests.loadgen.cli.clikit import loadgen, loadgen_run
from tests.loadgen.serve_app import REPO, script_server

SERVER = REPO / "tests/loadgen/kv_source_server.py"
FIELD = "usage.prompt_tokens_details.cached_tokens"


def scenario(url: str, *, expect_hit: bool = False, servers: str = "") -> str:
    expect = 'expect_cache = "hit"\n' if expect_hit else ""
    return f"""
name = "cache-fields"
[endpoint]
base_url = "{url}"
metrics_interval_s = 0.01
{servers}
[[canaries]]
id = "liar"
prompt = "one two three four"
max_tokens = 3
stream = false
{expect}
[sweep]
levels = [0]
canaries_per_level = 3
warmup = 0
baseline = 1
canary_pace_s = 0.1
"""


def run_report(text: str, tmp_path: Path, traces: Sequence[Path] = ()) -> tuple[dict[str, Any], str]:
    proc = loadgen_run(text, tmp_path / "runs")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    if traces:
        again = loadgen("report", str(proc.run_dir), "--engine-trace", *map(str, traces))
        assert again.returncode == 0, again.stdout + again.stderr
    report = orjson.loads((proc.run_dir / "report.json").read_bytes())
    assert problems(report, Report, strict=True) == []  # every key written is the model's, with its type
    html = (proc.run_dir / "report.html").read_text()
    assert ("Where the KV came from" in html) == any("provenance" in c for c in report["canaries"])
    return report, (proc.run_dir / "report.md").read_text()


def notices(report: dict[str, Any], words: str) -> list[str]:
    return [n for n in report["run"]["notices"] if words in n and "liar" in n]


@contextmanager
def engine(*args: str) -> Iterator[str]:
    with script_server(SERVER, *args) as url:
        yield url


def test_cached_above_prompt_is_a_notice_naming_the_field_and_canary(tmp_path: Path) -> None:
    with engine("--prompt-tokens", "2", "--cached", "50") as url:
        report, md = run_report(scenario(url), tmp_path)
    (said,) = notices(report, "above usage.prompt_tokens")
    assert FIELD in said and "in 4 of 4 answers" in said and "50 cached of 2 prompt tokens" in said
    assert "above usage.prompt\\_tokens" in md or "above usage.prompt_tokens" in md


@pytest.mark.parametrize("evidence", ["trace", "counters"])
def test_a_hit_the_engine_denies(tmp_path: Path, evidence: str) -> None:
    trace = tmp_path / "engine_steps-brought.jsonl"
    extra = ["--trace", str(trace)] if evidence == "trace" else []
    with engine("--prompt-tokens", "40", "--cached", "32", *extra) as url:
        report, md = run_report(scenario(url, expect_hit=True), tmp_path, [trace] if extra else [])
    (said,) = notices(report, "claims a prefix hit the engine denies")
    assert FIELD in said and "in 4 of 4 answers" in said and "0 local and 0 external" in said
    assert ("step trace" if evidence == "trace" else "by-source counters") in said
    prov = report["canaries"][0]["provenance"]
    assert prov["asked"] == "gpu_prefix or offload" and prov["not_proven"] == 4
    assert prov["reasons"] == {"computed instead": 4}
    assert [g["provenance"] for g in prov["groups"]] == ["computed"]
    assert "Where the KV came from" in md and "claims a prefix hit the engine denies" in md


@pytest.mark.parametrize("evidence", ["trace", "counters"])
def test_a_hit_the_answer_hides(tmp_path: Path, evidence: str) -> None:
    trace = tmp_path / "engine_steps-brought.jsonl"
    extra = ["--trace", str(trace)] if evidence == "trace" else []
    with engine("--prompt-tokens", "40", "--cached", "0", "--local", "32", *extra) as url:
        report, md = run_report(scenario(url), tmp_path, [trace] if extra else [])
    (said,) = notices(report, "hides a hit")
    assert FIELD in said and "in 4 of 4 answers" in said and "32 local and 0 external" in said
    groups = report["canaries"][0]["provenance"]["groups"]
    assert [(g["provenance"], g["completions"], g["diverged"]) for g in groups] == [("gpu_prefix", 4, 0)]
    assert "hides a hit" in md and "GPU prefix hit" in md


@pytest.mark.parametrize("evidence", ["trace", "counters"])
def test_pd_cached_tokens_are_the_decode_sides_hand_over(tmp_path: Path, evidence: str) -> None:
    """Prefill server: no hit of its own; decode server: 39 of 40 prompt tokens handed over, reported as cached;
    the router passes the decode server's answer on."""
    traces = [tmp_path / "engine_steps-brought-p.jsonl", tmp_path / "engine_steps-brought-d.jsonl"]
    with ExitStack() as stack:
        on = evidence == "trace"
        p = stack.enter_context(engine("--prompt-tokens", "40", *(["--trace", str(traces[0])] if on else [])))
        d_args = ["--prompt-tokens", "40", "--cached", "39", "--external", "39"]
        d = stack.enter_context(engine(*d_args, *(["--trace", str(traces[1])] if on else [])))
        router = stack.enter_context(engine("--prefill", p, "--decode", d))
        servers = (
            f'[[endpoint.servers]]\nname = "p"\nrole = "prefill"\nbase_url = "{p}"\n'
            f'[[endpoint.servers]]\nname = "d"\nrole = "decode"\nbase_url = "{d}"\n'
        )
        report, md = run_report(scenario(router, servers=servers), tmp_path, traces if on else [])
    (said,) = notices(report, "is the decode server's handed-over KV, not a prefix hit")
    assert FIELD in said and "in 4 of 4 answers" in said and "prefill server's own hit was 0" in said
    prov = report["canaries"][0]["provenance"]
    assert prov["asked"] == "transfer" and prov["proven"] == 4 and prov["not_proven"] == 0
    assert [g["provenance"] for g in prov["groups"]] == ["transfer"]
    assert "handed-over KV" in md and "P/D transfer" in md


def pd_run(tmp_path: Path, prefill: list[str], decode: list[str]) -> tuple[dict[str, Any], str]:
    """A P/D run through the router-like proxy, both servers tracing (the step trace is the evidence)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    traces = [tmp_path / "engine_steps-brought-p.jsonl", tmp_path / "engine_steps-brought-d.jsonl"]
    with ExitStack() as stack:
        p = stack.enter_context(engine("--prompt-tokens", "40", *prefill, "--trace", str(traces[0])))
        d = stack.enter_context(engine("--prompt-tokens", "40", *decode, "--trace", str(traces[1])))
        router = stack.enter_context(engine("--prefill", p, "--decode", d))
        servers = (
            f'[[endpoint.servers]]\nname = "p"\nrole = "prefill"\nbase_url = "{p}"\n'
            f'[[endpoint.servers]]\nname = "d"\nrole = "decode"\nbase_url = "{d}"\n'
        )
        return run_report(scenario(router, servers=servers), tmp_path, traces)


def test_pd_a_hand_over_is_no_hit_the_answer_hides_but_the_prefill_servers_own_hit_is(tmp_path: Path) -> None:
    """As vLLM 0.26 behind vllm-router answered: the decoder counts only its own prefix hit in cached_tokens, so a
    whole-prompt hand-over answers 0 cached, which is true; a prefill server's own hit is a hit the answer hides."""
    report, _ = pd_run(tmp_path / "a", [], ["--external", "39"])
    assert not notices(report, FIELD)
    assert report["canaries"][0]["provenance"]["proven"] == 4
    report, _ = pd_run(tmp_path / "b", ["--local", "32"], ["--external", "39"])
    (said,) = notices(report, "hides a hit")
    assert "in 4 of 4 answers" in said and "the decode server's own hit of 0 and the prefill server's of 32" in said


def test_pd_a_decoder_that_found_the_prompt_itself_did_not_take_the_hand_over(tmp_path: Path) -> None:
    """As vLLM 0.26 with NIXL did for a kept prompt: the decoder's own hit of 32, the 8-token tail handed over. The
    asked path (the hand-over) did not carry the prompt: named, and left out of the transfer's figures."""
    report, md = pd_run(tmp_path, ["--local", "32"], ["--cached", "32", "--local", "32", "--external", "8"])
    assert not notices(report, FIELD)
    prov = report["canaries"][0]["provenance"]
    assert (prov["asked"], prov["proven"], prov["not_proven"]) == ("transfer", 0, 4)
    assert prov["reasons"] == {"decoder's own GPU hit instead of a transfer": 4}
    assert [g["provenance"] for g in prov["groups"]] == ["gpu_prefix"]
    assert "decoder's own GPU hit instead of a transfer" in md


def test_an_offload_tier_the_engine_never_used_is_flagged(tmp_path: Path) -> None:
    """The server states a 4 GiB tier in vllm:cache_config_info, and its store/load byte counters never move."""
    with engine("--prompt-tokens", "40", "--offload-gib", "4") as url:
        report, md = run_report(scenario(url), tmp_path)
    check = report["run"]["kv_offload"]
    assert check["asked_by"] == "server" and check["moved"] is not True
    said = [n for n in report["run"]["notices"] if n.startswith("An offload tier was asked for")]
    assert len(said) == 1 and "never stored" in said[0]
    assert "An offload tier was asked for" in md
