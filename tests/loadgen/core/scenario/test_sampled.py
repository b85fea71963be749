"""Sampled canaries in the scenario: each rule refuses with the field named, and seeds/routes sets expand."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.errors import ScenarioError
from loadgen.core.scenario import parse_scenario
from loadgen.core.scenario.loading import with_overrides
from loadgen.core.wire import Features
from loadgen.load.canary_request import canary_body


def _scenario(**canary: Any) -> Any:
    return parse_scenario({"canaries": [{"id": "rl", "prompt": "hello there", **canary}]}, "rl.toml")


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"temperature": 0.7, "seed": None}, "needs a 'seed'"),
        ({"temperature": 0.7, "n": 2, "stream": True}, "set stream = false"),
        ({"n": 2}, "set temperature > 0"),
        ({"temperature": 1, "seeds": [3]}, "two or more distinct seeds"),
        ({"temperature": 1, "seeds": [3, 4], "seed": 3}, "not both"),
        ({"seeds": [3, 4]}, "a greedy answer ignores its seed"),
        ({"temperature": 1, "routes": ["chat", "chat"]}, "two or more distinct routes"),
        ({"temperature": 1, "routes": ["chat", "completions"], "kind": "chat"}, "'kind' or 'routes'"),
        ({"temperature": 1, "n": 2, "kind": "generate"}, "/generate"),
        ({"temperature": 3}, "temperature"),
        ({"temperature": 1, "top_p": 0}, "top_p"),
    ],
)
def test_each_rule_names_what_is_wrong(fields: dict[str, Any], words: str) -> None:
    with pytest.raises(ScenarioError, match="canaries") as err:
        _scenario(**fields)
    assert words in str(err.value)


@given(
    seeds=st.lists(st.integers(0, 2**31), min_size=2, max_size=5, unique=True),
    routes=st.none() | st.permutations(["completions", "chat", "generate"]).map(lambda r: r[:2]),
)
def test_a_set_expands_to_one_canary_per_route_and_seed_and_survives_a_re_validation(
    seeds: list[int], routes: list[str] | None
) -> None:
    s = _scenario(temperature=0.9, seeds=seeds, **({"routes": routes} if routes else {}))
    pairs = [(c.kind, c.seed) for c in s.canaries]
    kinds: list[str | None] = list(routes) if routes else [None]
    assert pairs == [(r, x) for r in kinds for x in seeds]
    assert {c.family for c in s.canaries} == {"rl"} and len({c.id for c in s.canaries}) == len(pairs)
    again = with_overrides(s, levels=[0, 2])
    assert [c.id for c in again.canaries] == [c.id for c in s.canaries]


def test_a_sampled_body_states_its_sampling_on_every_route() -> None:
    s = _scenario(temperature=0.8, top_p=0.9, top_k=20, min_p=0.05, seeds=[7, 8], routes=["chat", "generate"])
    chat, _, generate, _ = s.canaries
    _, body = canary_body(s, chat, model="m", features=Features(), salt=False)
    assert (body["temperature"], body["top_p"], body["top_k"], body["min_p"], body["seed"], body["n"]) == (
        0.8,
        0.9,
        20,
        0.05,
        7,
        1,
    )
    assert body["messages"] == [{"role": "user", "content": "hello there"}]
    _, body = canary_body(s, generate, model="m", features=Features(), salt=False)
    p = body["sampling_params"]
    assert (p["temperature"], p["top_p"], p["top_k"], p["min_p"], p["sampling_seed"]) == (0.8, 0.9, 20, 0.05, 7)


def test_a_greedy_body_is_unchanged_by_the_new_fields() -> None:
    s = _scenario()
    _, body = canary_body(s, s.canaries[0], model="m", features=Features(), salt=False)
    assert (body["temperature"], body["top_p"], body["n"], body["seed"]) == (0, 1, 1, 0)
    assert "top_k" not in body and "min_p" not in body
