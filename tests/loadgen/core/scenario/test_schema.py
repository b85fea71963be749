from pathlib import Path

import pytest

from loadgen.core.errors import ScenarioError
from loadgen.core.scenario import load_scenario, with_overrides
from scenarios import names, path_of

GOOD = """
name = "t"
[endpoint]
base_url = "http://127.0.0.1:9/v1/"
[[canaries]]
prompt = "hello"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", names())
def test_every_shipped_scenario_validates(name: str) -> None:
    scenario = load_scenario(path_of(name))
    assert scenario.canaries


def test_defaults_and_url_normalisation(tmp_path: Path) -> None:
    s = load_scenario(write(tmp_path, GOOD))
    assert s.endpoint.base_url == "http://127.0.0.1:9/v1"
    assert s.canaries[0].max_tokens == 64 and s.endpoint.read_timeout_s == 600.0
    assert s.canary_kind(s.canaries[0]) == "completions"


@pytest.mark.parametrize(
    ("text", "field", "expect"),
    [
        ("bogus = 1\n" + GOOD, "bogus", "unknown field"),
        (GOOD.replace('prompt = "hello"', 'prompt = "hello"\nmax_tokns = 5'), "canaries[0].max_tokns", "unknown field"),
        (GOOD.replace('prompt = "hello"', 'prompt = "hello"\nmax_tokens = "x"'), "canaries[0].max_tokens", "integer"),
        (
            GOOD.replace('prompt = "hello"', 'prompt = "hello"\nmax_tokens = -1'),
            "canaries[0].max_tokens",
            "greater than or equal to 1",
        ),
        (GOOD + "\n[sweep]\nlevels = []\n", "sweep.levels", "at least 1"),
        (GOOD + "\n[sweep]\nlevels = [0, 0]\n", "sweep.levels", "distinct"),
        (GOOD.replace("http://127.0.0.1:9/v1/", "localhost:8000"), "endpoint.base_url", "http(s) URL"),
        ('name = "t"\n', "canaries", "required"),
        (GOOD.replace('prompt = "hello"', ""), "canaries[0]", "exactly one of"),
        (GOOD + "\n[background]\nprompt_words = [50, 10]\n", "background.prompt_words", "low <= high"),
    ],
)
def test_invalid_scenarios_name_file_and_field(tmp_path: Path, text: str, field: str, expect: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    msg = str(info.value)
    assert str(path) in msg and f"field {field}:" in msg and expect in msg


def test_unreadable_and_non_toml_files(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.toml")
    with pytest.raises(ScenarioError, match="not valid TOML"):
        load_scenario(write(tmp_path, "name = "))


def test_overrides_are_validated_like_the_file(tmp_path: Path) -> None:
    s = load_scenario(write(tmp_path, GOOD))
    s2 = with_overrides(s, levels=[0, 2], canaries_per_level=3, labels={"k": "v"})
    assert s2.sweep.levels == [0, 2] and s2.sweep.canaries_per_level == 3 and s2.labels == {"k": "v"}
    with pytest.raises(ScenarioError, match="command line"):
        with_overrides(s, levels=[1, 1])
