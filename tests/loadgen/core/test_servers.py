"""The servers behind an endpoint: which side each serves, where its /metrics is, which one a router's error names."""

from __future__ import annotations

import pytest

from loadgen.core.scenario.schema import Server
from loadgen.core.servers import (
    behind_router,
    label,
    loaded_side,
    metrics_url_of,
    named_in,
    servers_of,
    side_servers,
)

P = Server(name="p", role="prefill", base_url="http://10.0.0.5:8100/v1")
D = Server(name="d", role="decode", base_url="http://10.0.0.6:8200", metrics_url="http://10.0.0.6:9200/metrics")
B = Server(name="b", role="both", base_url="http://10.0.0.7:81")
DARK = Server(name="x", role="decode", base_url="http://10.0.0.8:8300", metrics_url="")


def test_a_both_server_serves_either_side_and_the_default_loaded_side_is_decode() -> None:
    assert side_servers([P, D, B], "prefill") == [P, B]
    assert side_servers([P, D, B], "decode") == [D, B]
    assert (loaded_side(None), loaded_side("prefill")) == ("decode", "prefill")


def test_metrics_url_is_the_given_one_or_the_root_of_the_base_url_or_none() -> None:
    assert metrics_url_of(P) == "http://10.0.0.5:8100/metrics"  # /v1 dropped: engines serve /metrics at the root
    assert metrics_url_of(D) == "http://10.0.0.6:9200/metrics"
    assert metrics_url_of(DARK) is None
    assert label(P) == "server 'p' (prefill)"


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("Prefill request to http://10.0.0.5:8100 failed: Connection refused", "p"),
        ("KV fetch failed: prefill server http://10.0.0.5:8100 (engine loadgen-ab)", "p"),
        ("http://10.0.0.6:9200/metrics: HTTP 500", "d"),  # its metrics URL names it too
        ("Prefill request to http://10.0.0.5:81000 failed", None),  # another port, not a prefix match
        ("10.0.0.7:81 and 10.0.0.5:8100 both failed", None),  # two servers named: neither is the one
        ("connection refused", None),
        (None, None),
    ],
)
def test_the_server_an_error_names(text: str | None, expect: str | None) -> None:
    hit = named_in(text, [P, D, B])
    assert (hit.name if hit else None) == expect


def test_a_router_failure_names_the_servers_behind_it_and_the_one_that_failed() -> None:
    msg = behind_router("http://r:8000/v1/models: HTTP 500 (Prefill request to http://10.0.0.5:8100 failed)", [P, D])
    assert msg.startswith("the router at endpoint.base_url, in front of server 'p' (prefill), server 'd' (decode): ")
    assert msg.endswith("(the failure is that of server 'p' (prefill) at http://10.0.0.5:8100/v1)")
    assert "failure is that" not in behind_router("http://r:8000/v1/models: cannot connect", [P, D])


def test_servers_of_a_resolved_scenario() -> None:
    scenario = {"endpoint": {"servers": [P.model_dump(), D.model_dump()]}}
    assert servers_of(scenario) == [P, D]
    assert servers_of({"endpoint": {}}) == servers_of({}) == []  # a run folder from before servers
    assert servers_of({"endpoint": {"servers": [{"name": "p"}]}}) == []  # not one this version can read
