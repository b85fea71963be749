"""``background.phase``: its forms, their one normal spelling, and the scenario checks that name the field."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.errors import ScenarioError
from loadgen.core.scenario import parse_scenario
from loadgen.core.scenario.phase import BackgroundPhase, parse_phase


@given(st.integers(min_value=1, max_value=999_999))
def test_from_p_reads_back_as_written_and_from_1_is_decode(p: int) -> None:
    phase = parse_phase(f"from:{p}")
    assert phase == BackgroundPhase("decode", p) and phase.aimed
    assert parse_phase(str(phase)) == phase
    assert str(phase) == ("decode" if p == 1 else f"from:{p}")


@pytest.mark.parametrize("text", ["", "All", "decode ", "from:", "from:0", "from:-2", "from:01", "from:1.5", "pre"])
def test_other_text_is_refused_with_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match='"all", "prefill", "decode" or "from:<p>"'):
        parse_phase(text)


def scenario(background: dict[str, object], *, stream: bool = True) -> dict[str, object]:
    return {"canaries": [{"id": "c", "prompt": "x", "stream": stream}], "background": background}


def test_the_default_is_all_and_a_mode_is_kept_normalised() -> None:
    assert parse_scenario(scenario({}, stream=False), "t").background.phase == "all"
    assert parse_scenario(scenario({"phase": "from:1"}), "t").background.phase == "decode"
    assert parse_scenario(scenario({"phase": "prefill"}), "t").background.phase == "prefill"


@pytest.mark.parametrize(
    ("background", "stream", "said"),
    [
        ({"phase": "decode"}, False, 'field background: phase = "decode" times the background by the canary\'s'),
        ({"phase": "from:5"}, False, "set stream = true on canary 'c'"),
        ({"phase": "prefill", "stream": False}, True, "set background.stream = true"),
        ({"phase": "middle"}, True, 'field background.phase: expected "all"'),
    ],
)
def test_a_mode_the_run_cannot_time_is_a_scenario_error(background: dict[str, object], stream: bool, said: str) -> None:
    with pytest.raises(ScenarioError, match="invalid scenario") as err:
        parse_scenario(scenario(background, stream=stream), "t.toml")
    assert said in str(err.value)
