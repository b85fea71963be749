"""``loadgen.core.request``: a run request's overrides meet the scenario file in one place, checked as the file is."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core.claims import canaries_needed
from loadgen.core.errors import ScenarioError
from loadgen.core.request import RunRequest
from loadgen.core.scenario import Server, load_scenario
from scenarios import path_of

QUICKSTART = path_of("quickstart")


def test_no_override_is_the_file() -> None:
    assert RunRequest(QUICKSTART).scenario() == load_scenario(QUICKSTART)


def test_overrides_replace_the_files_values_and_labels_merge() -> None:
    file = load_scenario(QUICKSTART)
    servers = (Server(name="engine", base_url="http://127.0.0.1:9/"),)
    request = RunRequest(
        QUICKSTART,
        host="http://127.0.0.1:9",
        levels=(0, 3),
        canaries_per_level=2,
        labels={"cell": "a"},
        servers=servers,
    )
    got = request.scenario()
    assert got.endpoint.base_url == "http://127.0.0.1:9"
    assert got.sweep.levels == [0, 3] and got.sweep.canaries_per_level == 2
    assert got.labels == {**file.labels, "cell": "a"}
    assert tuple(got.endpoint.servers) == servers
    assert request.source == str(QUICKSTART)


@settings(max_examples=25, deadline=None)
@given(rate=st.floats(min_value=0.01, max_value=0.5), asked=st.integers(min_value=1, max_value=400))
def test_a_claim_raises_the_canaries_to_what_it_needs(rate: float, asked: int) -> None:
    got = RunRequest(QUICKSTART, canaries_per_level=asked, claim_max_rate=rate).scenario()
    assert got.sweep.canaries_per_level == max(asked, canaries_needed(rate))
    assert got.sweep.claim_max_rate == rate


def test_a_bad_override_fails_as_the_command_lines() -> None:
    with pytest.raises(ScenarioError, match="command line"):
        RunRequest(QUICKSTART, levels=(-1,)).scenario()
