"""Through the real CLI: the probe on JSON that Python parses and the manifest's writer (orjson) cannot keep.

``Infinity`` where a setting is an integer (``int(inf)`` raised), an integer of 30 digits, a lone surrogate
(``"\\ud800"``, no UTF-8 form), lists nested 300 deep (orjson stops at 255) or 100,000 deep (Python's parser
stops): each crashed ``loadgen run`` with a traceback. Now what the probe keeps is normalised where it is
decoded and the run goes on, saying so in the manifest's notices; a model id the run would send but cannot
(a lone surrogate) and a model list too deep to read at all end it with one line (exit 2).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.loadgen.cli.clikit import RealRun, loadgen_run
from tests.loadgen.fault_server import whole
from tests.loadgen.local_http import LocalServer, QuietHandler, serving
from tests.loadgen.scenariokit import tiny_scenario


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


MODELS = '{"object": "list", "data": [{"id": "m"}]}'
SERVER_INFO = (
    '{"vllm_config": {"scheduler_config": {"max_num_seqs": Infinity}, "model_config": {"dtype": '
    '123456789012345678901234567890}, "attention_config": {"backend": "FLASH\\ud800"}}}'
)


class JsonServer(LocalServer):
    def __init__(self, answers: dict[str, str]) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.answers = answers  # GET path -> JSON text, sent as it is


class Handler(QuietHandler):
    server: JsonServer

    def do_GET(self) -> None:
        answer = self.server.answers.get(self.path)
        self.send_body(404, b"{}") if answer is None else self.send_body(200, answer.encode())

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_body(200, json.dumps(whole()).encode())


@pytest.fixture
def json_server(request: pytest.FixtureRequest) -> Iterator[JsonServer]:
    with serving(JsonServer(request.param)) as server:
        yield server


def _run(server: JsonServer, tmp_path: Path) -> RealRun:
    return loadgen_run(tiny_scenario("json", server.url, levels=[0], background=False), tmp_path / "runs", "--quiet")


@pytest.mark.parametrize(
    "json_server",
    [
        {
            "/v1/models": '{"object": "list", "data": [{"id": "m", "meta": ' + nested(300) + "}]}",
            "/server_info?config_format=json": SERVER_INFO,
            "/get_server_info": '{"page_size": ' + nested(300) + "}",
        }
    ],
    indirect=True,
)
def test_unkeepable_json_is_normalised_and_said_and_the_run_goes_on(json_server: JsonServer, tmp_path: Path) -> None:
    done = _run(json_server, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    manifest = orjson.loads((done.run_dir / "manifest.json").read_bytes())
    assert manifest["status"] == "finished"
    settings = manifest["server"]["config"]["settings"]
    assert settings["max_num_seqs"] is None and settings["dtype"] is None
    assert settings["attention_backend"] == "FLASH\ufffd"
    meta = manifest["server"]["models"]["data"][0]["meta"]
    for _ in range(28):  # meta is at depth 3 (the body, data, the model): the list at depth 32 is left out
        meta = meta[0]
    assert meta == ["[nested deeper than 32 levels: left out]"]
    root = json_server.url.removesuffix("/v1")
    normalised = [n for n in manifest["notices"] if "kept as normalised" in n]
    assert normalised == [
        f"{json_server.url}/models: 1 value(s) nested deeper than 32 levels left out, kept as normalised "
        "(loadgen.core.jsonsafe)",
        f"{root}/get_server_info: 1 value(s) nested deeper than 32 levels left out, kept as normalised "
        "(loadgen.core.jsonsafe)",
        f"{root}/server_info?config_format=json: 1 integer(s) beyond 64 bits made null; 1 non-finite "
        "number(s) (NaN, Infinity) made null; 1 string(s) with a lone surrogate, not UTF-8, given U+FFFD in "
        "its place, kept as normalised (loadgen.core.jsonsafe)",
    ]
    report = orjson.loads((done.run_dir / "report.json").read_bytes())
    assert set(normalised) <= set(report["run"]["notices"])


@pytest.mark.parametrize(
    ("json_server", "said"),
    [
        (
            {"/v1/models": '{"object": "list", "data": [{"id": "m\\ud800"}]}'},
            "/models: the first model /v1/models lists is not valid Unicode (a lone surrogate); set endpoint.model",
        ),
        (
            {"/v1/models": '{"object": "list", "data": ' + nested(100_000) + "}"},
            "/models: answered JSON nested too deep to read",
        ),
    ],
    indirect=["json_server"],
)
def test_a_model_list_the_run_cannot_use_ends_it_in_one_line(
    json_server: JsonServer, said: str, tmp_path: Path
) -> None:
    done = _run(json_server, tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.strip()]
    assert f"{json_server.url}{said}" in line, line
    assert not done.out.exists() or not any(done.out.iterdir())
