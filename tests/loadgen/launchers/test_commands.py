"""The command lines each launcher kind builds: pinned against the servers' documented flags."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.scenario import LauncherSpec
from loadgen.launchers.commands import bound_host, exposed_host, plan_launch


def test_vllm_serve_with_dev_mode_and_the_cell_flags() -> None:
    spec = LauncherSpec(
        kind="vllm", model="Qwen/Qwen3-8B", args=["--no-enable-prefix-caching"], env={"VLLM_BATCH_INVARIANT": "1"}
    )
    plan = plan_launch(spec, 8123)
    assert plan.argv == [
        "vllm",
        "serve",
        "Qwen/Qwen3-8B",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--no-enable-prefix-caching",
    ]
    assert plan.env == {"VLLM_SERVER_DEV_MODE": "1", "VLLM_BATCH_INVARIANT": "1"}
    assert plan.ready_by == "health" and plan.health_url == "http://127.0.0.1:8123/health"
    assert plan.base_url == "http://127.0.0.1:8123"
    assert plan.shown() == (
        "VLLM_BATCH_INVARIANT=1 VLLM_SERVER_DEV_MODE=1 vllm serve Qwen/Qwen3-8B --host 127.0.0.1 --port 8123 "
        "--no-enable-prefix-caching"
    )


def test_vllm_dev_mode_can_be_turned_off_by_the_scenario() -> None:
    spec = LauncherSpec(kind="vllm", model="m", env={"VLLM_SERVER_DEV_MODE": "0"}, executable="/opt/venv/bin/vllm")
    plan = plan_launch(spec, 9000)
    assert plan.env == {"VLLM_SERVER_DEV_MODE": "0"} and plan.argv[0] == "/opt/venv/bin/vllm"


def test_sglang_launch_server_adds_metrics_once() -> None:
    args = ["--enable-deterministic-inference", "--disable-radix-cache"]
    plan = plan_launch(LauncherSpec(kind="sglang", model="/models/qwen", args=args), 30000, python="/usr/bin/python3")
    assert plan.argv == [
        "/usr/bin/python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/models/qwen",
        "--host",
        "127.0.0.1",
        "--port",
        "30000",
        *args,
        "--enable-metrics",
    ]
    again = plan_launch(LauncherSpec(kind="sglang", model="m", args=["--enable-metrics"]), 1, python="py")
    assert again.argv.count("--enable-metrics") == 1
    assert plan.env == {}


@pytest.mark.parametrize("port", [1, 30000, 55535, 55536, 59279, 65535])
def test_sglang_always_gets_a_grpc_port_in_range(port: int) -> None:
    """SGLang 0.5.15 refuses to start when its gRPC port (``--port`` + 10000 unless SGLANG_GRPC_PORT says) is
    outside 1..65535: a free port above 55535 (seen as a matrix cell on 59279) gets one 10000 below instead."""
    env = plan_launch(LauncherSpec(kind="sglang", model="m"), port, python="py").env
    grpc = int(env.get("SGLANG_GRPC_PORT", port + 10000))
    assert 1 <= grpc <= 65535 and grpc != port
    assert ("SGLANG_GRPC_PORT" in env) is (port > 55535)
    own = LauncherSpec(kind="sglang", model="m", env={"SGLANG_GRPC_PORT": "40001"})
    assert plan_launch(own, port, python="py").env == {"SGLANG_GRPC_PORT": "40001"}  # the scenario's wins


def test_llama_server_with_slots_and_metrics() -> None:
    plan = plan_launch(LauncherSpec(kind="llamacpp", model="/m/q.gguf", args=["-np", "8"], host="0.0.0.0"), 8080)
    assert plan.argv == [
        "llama-server",
        "-m",
        "/m/q.gguf",
        "--host",
        "0.0.0.0",
        "--port",
        "8080",
        "-np",
        "8",
        "--metrics",
    ]
    assert plan.base_url == "http://127.0.0.1:8080"  # listening everywhere: reached locally


def test_embedded_engine_announces_its_own_port() -> None:
    plan = plan_launch(LauncherSpec(args=["--batch-invariant"]), 0, python="/venv/bin/python")
    assert plan.argv == [
        "/venv/bin/python",
        "-P",
        "-m",
        "loadgen.engine",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--batch-invariant",
    ]
    assert plan.ready_by == "line" and plan.base_url is None and plan.health_url is None


def test_shell_command_gets_the_port_and_quoted_args() -> None:
    spec = LauncherSpec(kind="command", command="serve-it --listen {port} --json '{\"a\": 1}'", args=["--x", "a b"])
    plan = plan_launch(spec, 4242)
    assert plan.argv == ["/bin/sh", "-c", "serve-it --listen 4242 --json '{\"a\": 1}' --x 'a b'"]
    assert plan.health_url == "http://127.0.0.1:4242/health"


def test_ipv6_host_is_bracketed_in_urls() -> None:
    plan = plan_launch(LauncherSpec(kind="vllm", model="m", host="::1", health_path="/ready"), 7000)
    assert plan.health_url == "http://[::1]:7000/ready"


def test_real_engines_need_a_concrete_port() -> None:
    with pytest.raises(ValueError, match="concrete port"):
        plan_launch(LauncherSpec(kind="vllm", model="m"), 0)


@given(
    st.lists(
        st.text(alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12), max_size=6
    )
)
def test_args_reach_the_engine_unchanged_through_every_kind(args: list[str]) -> None:
    for spec in (LauncherSpec(kind="vllm", model="m", args=args), LauncherSpec(args=args)):
        argv = plan_launch(spec, 5).argv
        assert argv[len(argv) - len(args) :] == args
    shell = plan_launch(LauncherSpec(kind="command", command="srv {port}", args=args), 5)
    assert shlex.split(shell.argv[2]) == ["srv", "5", *args]


@pytest.mark.parametrize(
    ("host", "args", "extra", "bound"),
    [
        ("127.0.0.1", [], [], "127.0.0.1"),
        ("0.0.0.0", [], [], "0.0.0.0"),
        ("127.0.0.1", ["--host", "0.0.0.0"], [], "0.0.0.0"),
        ("127.0.0.1", ["--host=::"], [], "::"),
        ("0.0.0.0", ["--host", "0.0.0.0"], ["--host", "localhost"], "localhost"),  # the last --host wins
    ],
)
def test_the_bound_address_is_the_last_host_the_engine_is_given(
    host: str, args: list[str], extra: list[str], bound: str
) -> None:
    spec = LauncherSpec(kind="embedded", host=host, args=args)
    assert bound_host(spec, extra) == bound
    assert (exposed_host(spec, extra) is None) == (bound in ("127.0.0.1", "localhost", "::1"))
