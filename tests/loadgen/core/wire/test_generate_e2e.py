"""SGLang's native ``/generate`` as an endpoint kind, through a real ``loadgen run`` (real Locust, real HTTP).

The server (``concurrency_server.py --dialect sglang``) answers in SGLang 0.5.15's shapes and encodes in
each answer how many requests it served when the request arrived, but gives every position one token
string whatever its id: the class of endpoint where strings merge distinct ids. Through ``/generate``
the canaries are compared by ids and the divergence under load is seen exactly as the server made it;
through its OpenAI route (strings only) the same load looks deterministic, and the report says why the
comparison fell back to strings and where ids would come from.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from collectors.jsonl import read_jsonl
from loadgen.core.record import CanaryRecord
from loadgen.core.request import RunRequest
from loadgen.studies.run import run
from tests.loadgen.concurrency_server import token_ids  # the server's rule: n requests at arrival give these ids
from tests.loadgen.serve_app import script_server

SERVER = Path(__file__).parents[2] / "concurrency_server.py"
MAX_TOKENS = 12
LEVELS = [0, 2, 4]
PROMPT = "canary through the native route"


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    with script_server(SERVER, "--dialect", "sglang", "--token-s", "0.01", *request.param) as url:
        yield url


def scenario(tmp_path: Path, *, kind: str, stream: bool) -> Path:
    path = tmp_path / "native.toml"
    path.write_text(f"""
name = "native"
[endpoint]
kind = "{kind}"
[[canaries]]
id = "c"
prompt = "{PROMPT}"
max_tokens = {MAX_TOKENS}
logprobs = true
top_logprobs = 2
stream = {str(stream).lower()}
[background]
seed = 3
prompt_words = [4, 8]
max_tokens = [30, 50]
stream = {str(stream).lower()}
handover_s = 0.1
[sweep]
levels = {LEVELS}
canaries_per_level = 3
warmup = 0
baseline = 2
""")
    return path


def _arrivals(url: str) -> list[int]:
    with urllib.request.urlopen(f"{url}/_arrivals") as resp:
        return [a["n"] for a in orjson.loads(resp.read()) if a["prompt"].startswith(PROMPT[:20])]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("server", [[], ["--incremental"]], ids=["cumulative", "incremental"], indirect=True)
def test_generate_kind_compares_by_ids(server: str, stream: bool, tmp_path: Path) -> None:
    result = run(RunRequest(scenario(tmp_path, kind="generate", stream=stream), host=server, out_dir=tmp_path / "runs"))
    assert result.status == "finished"
    records = sorted(
        (CanaryRecord.from_dict(r) for r in read_jsonl(result.run_dir / "canaries.jsonl").rows),
        key=lambda r: r.sent_at,
    )
    seen = _arrivals(server)
    assert len(seen) == len(records) == 2 + 3 * len(LEVELS)
    for record, n in zip(records, seen, strict=True):
        assert record.status == "ok" and record.endpoint == "generate"
        assert record.token_ids == token_ids(n, MAX_TOKENS)  # ids as the server sent them, streamed or whole
        assert record.tokens == [f" w{i}" for i in range(MAX_TOKENS)]
        assert record.logprobs == [-0.25] * MAX_TOKENS
        assert record.top_logprobs is not None and record.top_logprobs[0] == [(" w0", -0.25), (" w0x", -1.5)]
        assert record.finish_reason == "length"
        assert record.usage == {
            "prompt_tokens": 8,
            "completion_tokens": MAX_TOKENS,
            "total_tokens": 8 + MAX_TOKENS,
            "prompt_tokens_details": {"cached_tokens": 0},
        }
        assert record.request is not None and "model" not in record.request
        assert record.request["sampling_params"]["max_new_tokens"] == MAX_TOKENS

    manifest = orjson.loads((result.run_dir / "manifest.json").read_bytes())
    assert manifest["server"]["version"] == "0.5.15"  # SGLang has no /version: read from /server_info
    settings = manifest["server"]["config"]["settings"]
    assert settings["prefix_caching"] is True and settings["batch_invariant"] is False
    assert settings["attention_backend"] == "triton" and settings["cached_tokens_reported"] is True

    report = orjson.loads((result.run_dir / "report.json").read_bytes())
    (canary,) = report["canaries"]
    assert canary["reference"]["identity"] == "token_ids" and not canary["reference"].get("identity_note")
    (reference,) = {
        tuple(token_ids(n, MAX_TOKENS)) for r, n in zip(records, seen, strict=True) if r.phase == "baseline"
    }
    for level in report["levels"]:
        sent = [n for r, n in zip(records, seen, strict=True) if r.phase == "sweep" and r.level == level["concurrency"]]
        assert level["unique_completions"] == len({tuple(token_ids(n, MAX_TOKENS)) for n in sent})
        assert level["diverged"] == sum(tuple(token_ids(n, MAX_TOKENS)) != reference for n in sent)
    # the load was seen: a held level gives every canary there the same count, so the same ids (one unique
    # completion), but not the reference's
    assert any(lv["diverged"] for lv in report["levels"] if lv["concurrency"] > 0)


@pytest.mark.parametrize("server", [[]], ids=["cumulative"], indirect=True)
def test_openai_route_of_the_same_server_hides_it_and_says_why(server: str, tmp_path: Path) -> None:
    result = run(
        RunRequest(scenario(tmp_path, kind="completions", stream=False), host=server, out_dir=tmp_path / "runs")
    )
    assert result.status == "finished"
    assert max(_arrivals(server)) >= 3  # the server did serve canaries beside other requests...
    report = orjson.loads((result.run_dir / "report.json").read_bytes())
    (canary,) = report["canaries"]
    assert canary["reference"]["identity"] == "tokens"
    assert all(lv["unique_completions"] == 1 for lv in report["levels"])  # ...which strings cannot show
    note = canary["reference"]["identity_note"]
    assert "no token ids" in note and 'endpoint kind "generate"' in note
    assert "compared by token strings" in (result.run_dir / "report.md").read_text()
