"""``kv_offload`` becomes the engine's offloading flags wherever a command line is built (one engine, each server of
a topology, a matrix cell), and the manifest's ``engine`` says what was asked."""

from __future__ import annotations

import itertools

from loadgen.core.scenario import LauncherSpec, MatrixCell, Side, TopologySpec, parse_scenario
from loadgen.core.scenario.engines import KvOffload
from loadgen.launchers.commands import kv_offload_flags, plan_launch
from loadgen.launchers.launcher import Launcher
from loadgen.launchers.topology_commands import plan_servers
from loadgen.studies.matrix import cell_launcher

TIER = KvOffload(size_gib=4)


def _ports() -> itertools.count[int]:
    return itertools.count(8100)


def test_vllm_gets_size_and_backend_and_the_embedded_engine_its_dtype_too() -> None:
    vllm = LauncherSpec(kind="vllm", model="m", args=["--enforce-eager"], kv_offload=KvOffload(size_gib=2.5))
    assert plan_launch(vllm, 8000).argv[-5:] == [
        "--enforce-eager",
        "--kv-offloading-size",
        "2.5",
        "--kv-offloading-backend",
        "native",
    ]
    lmcache = vllm.model_copy(update={"kv_offload": KvOffload(size_gib=16, backend="lmcache")})
    assert plan_launch(lmcache, 8000).argv[-4:] == ["--kv-offloading-size", "16", "--kv-offloading-backend", "lmcache"]
    embedded = LauncherSpec(kv_offload=KvOffload(size_gib=0.25, dtype="fp8"))
    argv = plan_launch(embedded, 0, python="py").argv
    assert argv[-6:] == [
        "--kv-offloading-size",
        "0.25",
        "--kv-offloading-backend",
        "native",
        "--kv-offloading-dtype",
        "fp8",
    ]
    assert "--kv-offloading-dtype" not in plan_launch(LauncherSpec(kv_offload=TIER), 0, python="py").argv
    assert "--kv-offloading-size" not in plan_launch(LauncherSpec(), 0, python="py").argv
    assert kv_offload_flags("vllm", KvOffload(size_gib=1234567.5))[1] == "1234567.5"  # no digit lost


def test_each_server_of_a_topology_gets_its_own_sides_or_the_launchers() -> None:
    launcher = LauncherSpec(kind="vllm", model="m", kv_offload=TIER)
    topology = TopologySpec(decode=Side(kv_offload=KvOffload(size_gib=8)))
    prefill, decode = plan_servers(launcher, topology, "pd", _ports().__next__)
    assert prefill.kv_offload == TIER and decode.kv_offload == KvOffload(size_gib=8)
    at = prefill.plan.argv.index("--kv-offloading-size")
    assert prefill.plan.argv[at + 1] == "4"
    assert decode.plan.argv[decode.plan.argv.index("--kv-offloading-size") + 1] == "8"
    (engine,) = plan_servers(LauncherSpec(), TopologySpec(mode="reload"), "reload", _ports().__next__)
    assert engine.kv_offload is None and "--kv-offloading-size" not in engine.plan.argv


def test_a_cells_setting_replaces_the_launchers() -> None:
    s = parse_scenario(
        {
            "canaries": [{"prompt": "hi"}],
            "launcher": {"kind": "vllm", "model": "m", "kv_offload": {"size_gib": 1}},
            "matrix": {"cells": [{"name": "base"}, {"name": "big", "kv_offload": {"size_gib": 32}}]},
        },
        "s.toml",
    )
    assert s.matrix is not None
    base, big = (cell_launcher(s.launcher, c) for c in s.matrix.cells)
    assert base is not None and base.kv_offload == KvOffload(size_gib=1)
    assert big is not None and big.kv_offload == KvOffload(size_gib=32)
    assert cell_launcher(None, MatrixCell(name="x", kv_offload=TIER)).kv_offload == TIER  # type: ignore[union-attr]


def test_the_manifest_records_what_was_asked() -> None:
    facts = Launcher(LauncherSpec(kv_offload=KvOffload(size_gib=2, dtype="fp8"))).describe()
    assert facts["kv_offload"] == {"size_gib": 2.0, "backend": "native", "dtype": "fp8"}
    assert Launcher(LauncherSpec()).describe()["kv_offload"] is None
