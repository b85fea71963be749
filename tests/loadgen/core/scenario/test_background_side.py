"""``background.side``: lengths that load one side of a prefill/decode endpoint; the scrape interval."""

from pathlib import Path

import pytest

from loadgen.core.errors import ScenarioError
from loadgen.core.scenario import Scenario, load_scenario, with_overrides
from loadgen.core.scenario.schema import SIDE_PRESETS

HEAD = '[endpoint]\nbase_url = "http://127.0.0.1:9000"\n[[canaries]]\nprompt = "x"\n'


def _load(tmp_path: Path, text: str) -> Scenario:
    path = tmp_path / "side.toml"
    path.write_text(HEAD + text)
    return load_scenario(path)


@pytest.mark.parametrize("side", ["prefill", "decode"])
def test_a_side_sets_the_lengths_the_scenario_leaves_out(tmp_path: Path, side: str) -> None:
    bg = _load(tmp_path, f'[background]\nside = "{side}"\n').background
    assert (bg.side, bg.prompt_words, bg.max_tokens) == (side, *SIDE_PRESETS[side].values())
    prefill = SIDE_PRESETS["prefill"]
    assert prefill["max_tokens"] == (1, 4) and SIDE_PRESETS["decode"]["prompt_words"][1] < prefill["prompt_words"][0]


def test_lengths_given_win_and_survive_a_re_validation(tmp_path: Path) -> None:
    scenario = _load(tmp_path, '[background]\nside = "prefill"\nmax_tokens = [1, 1]\n')
    assert scenario.background.max_tokens == (1, 1)
    assert scenario.background.prompt_words == SIDE_PRESETS["prefill"]["prompt_words"]
    again = with_overrides(scenario, levels=[0, 4])
    assert again.background == scenario.background
    assert _load(tmp_path, "").background.side is None  # one engine: no preset, the defaults as before
    assert _load(tmp_path, "").background.max_tokens == (16, 128)


def test_an_unknown_side_and_a_bad_interval_name_their_fields(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"field background\.side: Input should be 'prefill' or 'decode'"):
        _load(tmp_path, '[background]\nside = "router"\n')
    path = tmp_path / "interval.toml"
    path.write_text(HEAD.replace("[endpoint]\n", "[endpoint]\nmetrics_interval_s = 0\n"))
    with pytest.raises(ScenarioError, match=r"field endpoint\.metrics_interval_s: Input should be greater than or"):
        load_scenario(path)
    path.write_text(HEAD.replace("[endpoint]\n", "[endpoint]\nmetrics_interval_s = 0.01\n"))
    assert load_scenario(path).endpoint.metrics_interval_s == 0.01
