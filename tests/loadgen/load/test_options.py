from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.errors import UsageError
from loadgen.core.options import auto_processes, parse_labels, parse_levels, parse_processes
from loadgen.load.options import normalise


def test_web_ui_strings_are_normalised_to_real_types() -> None:
    opts = normalise(
        SimpleNamespace(
            scenario="quickstart",
            levels=" 0, 4,16",
            canaries_per_level="12",
            labels="engine=vllm, batch_invariant=1",
            out_dir="",
            run_dir="",
            host="http://127.0.0.1:8000/",
        )
    )
    assert opts.levels == [0, 4, 16]
    assert opts.canaries_per_level == 12
    assert opts.labels == {"engine": "vllm", "batch_invariant": "1"}
    assert opts.out_dir == "runs"
    assert opts.host == "http://127.0.0.1:8000"


def test_defaults_mean_use_the_scenario() -> None:
    opts = normalise(SimpleNamespace(levels="", canaries_per_level=0, labels=""))
    assert opts.levels is None and opts.canaries_per_level is None and opts.labels == {}


@pytest.mark.parametrize("bad", ["a,b", "1,-2"])
def test_bad_levels_name_the_option(bad: str) -> None:
    with pytest.raises(UsageError, match="--levels"):
        parse_levels(bad)


def test_bad_label_names_the_option() -> None:
    with pytest.raises(UsageError, match="--label"):
        parse_labels(["novalue"])


def test_bad_canaries_per_level_names_the_option() -> None:
    with pytest.raises(UsageError, match="--canaries-per-level"):
        normalise(SimpleNamespace(canaries_per_level="many"))


@given(cores=st.integers(1, 4096))
def test_processes_auto_leaves_the_master_a_core_and_never_splits_two(cores: int) -> None:
    workers = parse_processes("auto", cores)
    assert workers == auto_processes(cores)
    assert workers == 0 if cores <= 2 else workers == cores - 1
    assert parse_processes(" AUTO ", cores) == workers and parse_processes("7", cores) == 7
