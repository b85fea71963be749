"""``loadgen.launchers.approval``: a launcher with ``require_approval`` starts only once its exact command is approved.

What is shown is what runs: the approved line, split as sh splits it, is the environment and the argv of the
start (any argument a scenario could hold, or the line is refused); an approval is of one command, so one
argument changed is refused again; the engine is talked to on this machine only. And ``Launcher.start`` asks
before any process starts.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.errors import UsageError
from loadgen.core.scenario import APPROVE_ENV, LauncherSpec, TopologySpec
from loadgen.launchers.approval import approval_digest, check_approved, command_to_approve
from loadgen.launchers.commands import plan_launch
from loadgen.launchers.launcher import Launcher
from loadgen.launchers.topology import start_topology

PY = "/opt/py/bin/python3"


def approve(spec: LauncherSpec) -> dict[str, str]:
    return {APPROVE_ENV: approval_digest(command_to_approve(spec, python=PY))}


@pytest.mark.parametrize(
    "spec",
    [
        LauncherSpec(kind="embedded", args=["--logit-scale=1.0"], port=8123),
        LauncherSpec(kind="vllm", model="m", env={"A": "b c"}, args=["--x", "y z"], port=8123),
        LauncherSpec(kind="sglang", model="m", port=8123),
        LauncherSpec(kind="llamacpp", model="m", executable="/bin/x", port=8123),
        LauncherSpec(kind="command", command="serve --port {port} 'q'", args=["a b"], port=8123),
    ],
    ids=lambda s: s.kind,
)
def test_the_command_approved_is_the_command_started(spec: LauncherSpec) -> None:
    assert command_to_approve(spec, python=PY) == plan_launch(spec, 8123, python=PY).shown()
    free = spec.model_copy(update={"port": 0})
    shown = command_to_approve(free, python=PY)
    if spec.kind == "embedded":  # it picks its port itself and says which
        assert shown == plan_launch(free, 0, python=PY).shown()
    else:  # a port picked at each start: shown as {port}, the rest as started
        assert "{port}" in shown and shown.replace("{port}", "8123").replace("'8123'", "8123") == (
            plan_launch(spec, 8123, python=PY).shown()
        )


@given(st.lists(st.text(max_size=12), max_size=5), st.sampled_from(["embedded", "vllm", "command"]))
def test_what_is_shown_splits_into_exactly_what_runs_or_is_refused(args: list[str], kind: str) -> None:
    extra = {"model": "m"} if kind == "vllm" else {"command": "serve {port}"} if kind == "command" else {}
    spec = LauncherSpec(kind=kind, args=args, port=8123, require_approval=True, **extra)  # type: ignore[arg-type]
    plan = plan_launch(spec, 8123, python=PY)
    try:
        check_approved(spec, python=PY, environ=approve(spec))
    except UsageError as exc:
        assert "cannot be approved" in str(exc)
        return
    words = shlex.split(command_to_approve(spec, python=PY))
    assert words == [*(f"{k}={v}" for k, v in sorted(plan.env.items())), *plan.argv]


def test_no_approval_another_command_s_or_a_blanket_one_is_refused_showing_the_command() -> None:
    spec = LauncherSpec(kind="command", command="touch /tmp/x; serve {port}", require_approval=True)
    shown = command_to_approve(spec, python=PY)
    for environ, other in (({}, False), ({APPROVE_ENV: "yes"}, True), ({APPROVE_ENV: "1"}, True)):
        with pytest.raises(UsageError) as info:
            check_approved(spec, python=PY, environ=environ)
        assert f":\n{shown}\nRead it. To start it, run again with {APPROVE_ENV}={approval_digest(shown)} " in str(
            info.value
        )
        assert ("holds another value" in str(info.value)) is other
    changed = spec.model_copy(update={"args": ["--one-more"]})
    with pytest.raises(UsageError, match="holds another value"):
        check_approved(changed, python=PY, environ=approve(spec))
    check_approved(spec, python=PY, environ=approve(spec))  # approved: returns
    check_approved(spec.model_copy(update={"require_approval": False}), python=PY, environ={})  # asks nothing


@pytest.mark.parametrize("host", ["10.0.0.5", "evil.example", "::ffff:8.8.8.8"])
def test_an_engine_to_approve_is_talked_to_on_this_machine_only(host: str) -> None:
    """Kind ``command`` does not show its ``host`` (only the URL loadgen sends to uses it): refused, approved or not."""
    spec = LauncherSpec(kind="command", command="serve {port}", host=host, require_approval=True)
    with pytest.raises(UsageError, match="talked to on this machine only"):
        check_approved(spec, python=PY, environ=approve(spec))
    for local in ("127.0.0.1", "0.0.0.0", "::1", "::", "localhost"):
        same = spec.model_copy(update={"host": local})
        check_approved(same, python=PY, environ=approve(same))


def test_launcher_start_asks_before_any_process_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "ran"
    spec = LauncherSpec(kind="command", command=f"touch {marker}; sleep 5 # {{port}}", require_approval=True)
    monkeypatch.delenv(APPROVE_ENV, raising=False)
    with Launcher(spec) as launcher, pytest.raises(UsageError, match="require_approval"):
        launcher.start(tmp_path / "engine.log")
    assert not marker.exists() and not (tmp_path / "engine.log").exists()


def test_a_topology_refuses_a_launcher_that_asks_for_approval(tmp_path: Path) -> None:
    """A topology starts several engines and a router: one approval cannot cover them."""
    with pytest.raises(UsageError, match="approval is of one command"):
        start_topology(LauncherSpec(require_approval=True), TopologySpec(), "pd", tmp_path / "logs")
    assert not (tmp_path / "logs").exists()
