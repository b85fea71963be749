import socket
import time
from pathlib import Path

import pytest

from loadgen.errors import EndpointError
from loadgen.studies.probe import probe
from loadgen.wire import Features

WANTED = Features(return_token_ids=True, logprobs=True, top_logprobs=2, include_usage=True)


def test_probe_reads_model_and_identity(fault_server: str) -> None:
    info = probe(fault_server, model=None, kinds={"completions"}, wanted=WANTED, api_key=None)
    assert info.model == "m"
    assert info.kinds["completions"].identity == "token_ids"
    assert info.kinds["completions"].features.return_token_ids
    assert info.features_json()["completions"]["attempts"][0].endswith("HTTP 200")


def test_unknown_model_lists_what_is_served(fault_server: str) -> None:
    with pytest.raises(EndpointError, match=r"model 'nope' is not served; the server has \['m'\]"):
        probe(fault_server, model="nope", kinds={"completions"}, wanted=WANTED, api_key=None)


def test_missing_chat_endpoint_is_named(fault_server: str) -> None:
    with pytest.raises(EndpointError, match="no chat endpoint"):
        probe(fault_server, model="m", kinds={"chat"}, wanted=WANTED, api_key=None)


def test_unreachable_endpoint_fails_fast_with_url() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(EndpointError, match=f"http://127.0.0.1:{port}/v1/models: cannot connect"):
        probe(f"http://127.0.0.1:{port}", model=None, kinds={"completions"}, wanted=WANTED, api_key=None)
    assert time.monotonic() - t0 < 5


def test_not_openai_compatible(fault_server: str) -> None:
    with pytest.raises(EndpointError, match="expected an OpenAI-compatible server"):
        probe(fault_server + "/nothing-here", model=None, kinds={"completions"}, wanted=WANTED, api_key=None)


def test_a_busy_endpoint_is_asked_again_not_read_as_a_dialect(tmp_path: Path) -> None:
    """503s say nothing about which fields the server accepts: the probe keeps asking for token ids."""
    from loadgen.launchers.process import start_embedded

    args = ["--fault-status", "503", "--fault-rate", "0.5", "--fault-seed", "3"]
    with start_embedded(args, log_path=tmp_path / "e.log") as engine:
        info = probe(engine.url, model=None, kinds={"completions"}, wanted=WANTED, api_key=None)
        assert info.kinds["completions"].features.return_token_ids
        assert info.kinds["completions"].identity == "token_ids"
    always = ["--fault-status", "503", "--fault-rate", "1.0"]
    with (
        start_embedded(always, log_path=tmp_path / "f.log") as engine,
        pytest.raises(EndpointError, match="HTTP 503 to every probe request"),
    ):
        probe(engine.url, model=None, kinds={"completions"}, wanted=WANTED, api_key=None)
