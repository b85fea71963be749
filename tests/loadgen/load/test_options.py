from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.errors import UsageError
from loadgen.core.manifest import EngineFacts
from loadgen.core.options import auto_processes, parse_labels, parse_levels, parse_processes
from loadgen.core.scenario import Server
from loadgen.load.options import StartedEngine, normalise, summary_only


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


def test_the_started_engine_crosses_to_locust_typed_and_whole() -> None:
    """``--started-engine`` carries the engine ``loadgen run --ui`` started into Locust's process: the servers
    behind a router come back as the scenario's ``Server`` models, the facts as the manifest's; a value of
    another shape is a usage error naming the option, never a half-read engine."""
    servers = [
        Server(name="p", role="prefill", base_url="http://127.0.0.1:1"),
        Server(name="d", role="decode", base_url="http://127.0.0.1:2", metrics_url="http://127.0.0.1:2/metrics"),
    ]
    facts: EngineFacts = {"kind": "embedded", "topology": "pd", "starts": 1}
    started = StartedEngine("http://127.0.0.1:3", facts, ["/tmp/a.log"], servers)
    back = StartedEngine.of(SimpleNamespace(started_engine=started.to_option()))
    assert back == started and all(isinstance(s, Server) for s in back.servers)
    assert StartedEngine.of(SimpleNamespace(started_engine="")) is None
    for bad in (
        '{"url": "u", "facts": {"starts": "x"}, "logs": [], "servers": []}',
        '{"url": "u", "facts": {}, "logs": [], "servers": [{"name": "p"}]}',
        "{}",
        "[1]",
    ):
        with pytest.raises(UsageError, match="--started-engine"):
            StartedEngine.of(SimpleNamespace(started_engine=bad))


def test_locusts_stats_table_comes_once_unless_print_stats_asks_for_it_every_2_s() -> None:
    quiet, asked = SimpleNamespace(print_stats=False, only_summary=False), SimpleNamespace(print_stats=True)
    summary_only(quiet)
    summary_only(asked)
    assert quiet.only_summary is True
    assert not hasattr(asked, "only_summary")  # left to Locust: its periodic table, as asked
