"""``[[endpoint.servers]]``: the engines behind a router, validated like the endpoint itself."""

from pathlib import Path

import pytest

from loadgen.core.errors import ScenarioError
from loadgen.core.scenario import load_scenario

HEAD = '[endpoint]\nbase_url = "http://127.0.0.1:9000"\n[[canaries]]\nprompt = "x"\n'


def _write(tmp_path: Path, servers: str) -> Path:
    path = tmp_path / "pd.toml"
    path.write_text(HEAD + servers)
    return path


def test_a_prefill_and_a_decode_server_behind_a_router(tmp_path: Path) -> None:
    scenario = load_scenario(
        _write(
            tmp_path,
            '[[endpoint.servers]]\nname = "p"\nrole = "prefill"\nbase_url = "http://127.0.0.1:9001/"\n'
            '[[endpoint.servers]]\nname = "d"\nrole = "decode"\nbase_url = "http://127.0.0.1:9002"\n'
            'metrics_url = "http://127.0.0.1:9003/metrics"\n',
        )
    )
    p, d = scenario.endpoint.servers
    assert (p.name, p.role, p.base_url, p.metrics_url) == ("p", "prefill", "http://127.0.0.1:9001", None)
    assert (d.role, d.metrics_url) == ("decode", "http://127.0.0.1:9003/metrics")
    assert load_scenario(_write(tmp_path, "")).endpoint.servers == []


@pytest.mark.parametrize(
    ("servers", "field", "expect"),
    [
        (
            '[[endpoint.servers]]\nname = "a"\nrole = "prefill"\nbase_url = "http://h:1"\n'
            '[[endpoint.servers]]\nname = "a"\nrole = "decode"\nbase_url = "http://h:2"\n',
            "endpoint.servers",
            "server names must be distinct",
        ),
        (
            '[[endpoint.servers]]\nname = "a"\nrole = "prefill"\nbase_url = "http://h:1"\n',
            "endpoint.servers",
            "must cover both prefill and decode",
        ),
        (
            '[[endpoint.servers]]\nname = "a"\nrole = "mixed"\nbase_url = "http://h:1"\n',
            "endpoint.servers[0].role",
            "'prefill', 'decode' or 'both'",
        ),
        (
            '[[endpoint.servers]]\nname = "a"\nbase_url = "ftp://h:1"\n',
            "endpoint.servers[0].base_url",
            "expected an http(s) URL",
        ),
        (
            '[[endpoint.servers]]\nname = "a b"\nbase_url = "http://h:1"\n',
            "endpoint.servers[0].name",
            "",
        ),
        (
            '[[endpoint.servers]]\nname = "a"\nbase_url = "http://h:1"\nmetrics = "x"\n',
            "endpoint.servers[0].metrics",
            "unknown field",
        ),
    ],
)
def test_bad_servers_name_the_file_and_the_field(tmp_path: Path, servers: str, field: str, expect: str) -> None:
    with pytest.raises(ScenarioError) as err:
        load_scenario(_write(tmp_path, servers))
    text = str(err.value)
    assert str(tmp_path / "pd.toml") in text
    assert f"field {field}:" in text
    assert expect in text
