"""Matrix cells over a topology: each cell's mode and sides, and the mistakes refused before any cell runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.core.errors import ScenarioError
from loadgen.core.scenario import MatrixCell, Side, load_scenario, parse_scenario
from loadgen.studies.matrix import cell_launcher, cell_mode, cell_topology, check_matrix, run_matrix
from scenarios import path_of

BASE = {
    "canaries": [{"prompt": "hi"}],
    "launcher": {"kind": "vllm", "model": "m", "args": ["--enforce-eager"]},
    "topology": {"prefill": {"args": ["--gpu-memory-utilization", "0.14"]}, "decode": {"env": {"A": "1"}}},
}


def test_a_cells_sides_come_after_the_scenarios_and_its_args_reach_every_server() -> None:
    cells = [
        {"name": "colocated", "topology": "colocated", "args": ["--no-enable-prefix-caching"]},
        {"name": "foreign", "prefill": {"env": {"VLLM_ATTENTION_BACKEND": "TRITON_ATTN"}}, "decode": {"args": ["-x"]}},
        {"name": "reload", "topology": "reload", "decode": {"env": {"A": "2"}}},
    ]
    s = parse_scenario({**BASE, "matrix": {"cells": cells}}, "s.toml")
    assert s.matrix is not None
    colocated, foreign, reload = s.matrix.cells
    assert [cell_mode(s, c) for c in s.matrix.cells] == ["colocated", "pd", "reload"]
    topo = cell_topology(s, foreign)
    assert topo is not None and topo.mode == "pd"
    assert topo.prefill == Side(
        args=["--gpu-memory-utilization", "0.14"], env={"VLLM_ATTENTION_BACKEND": "TRITON_ATTN"}
    )
    assert topo.decode == Side(args=["-x"], env={"A": "1"})
    assert cell_topology(s, reload).decode.env == {"A": "2"}  # type: ignore[union-attr]
    assert cell_topology(s, colocated).mode == "colocated"  # type: ignore[union-attr]
    launcher = cell_launcher(s.launcher, colocated)
    assert launcher is not None and launcher.args == ["--enforce-eager", "--no-enable-prefix-caching"]
    plain = parse_scenario({"canaries": [{"prompt": "hi"}]}, "p.toml")
    assert cell_topology(plain, MatrixCell(name="x")) is None and cell_mode(plain, MatrixCell(name="x")) == "colocated"
    assert check_matrix(s, "s.toml") == s.matrix.cells


def test_a_cells_connector_replaces_the_scenarios_so_one_matrix_mixes_nixl_pairs_and_an_example_reload() -> None:
    cells = [
        {"name": "colocated", "topology": "colocated"},
        {"name": "same-kernel"},
        {"name": "foreign", "connector_extra": {"enforce_handshake_compat": False}},
        {"name": "reload", "topology": "reload", "connector": "example"},
    ]
    s = parse_scenario({**BASE, "matrix": {"cells": cells}}, "s.toml")
    assert s.matrix is not None
    topologies = [cell_topology(s, c) for c in s.matrix.cells]
    assert [(t.connector, t.connector_extra) for t in topologies if t is not None] == [
        ("nixl", {}),
        ("nixl", {}),
        ("nixl", {"enforce_handshake_compat": False}),
        ("example", {}),
    ]
    assert check_matrix(s, "s.toml") == s.matrix.cells


def test_the_shipped_pd_scenario_names_every_cell_of_the_study() -> None:
    s = load_scenario(path_of("pd-embedded"))
    assert {cell_mode(s, c) for c in s.matrix.cells} == {"colocated", "pd", "reload"}  # type: ignore[union-attr]
    names = [c.name for c in s.matrix.cells]  # type: ignore[union-attr]
    for cell in ("colocated", "pd-same-kernel", "pd-foreign-prefill", "pd-both-invariant", "own-reload"):
        assert cell in names
    assert [c.name for c in s.matrix.cells if c.decoder_direct] == ["decoder-direct"]  # type: ignore[union-attr]
    assert check_matrix(s, "pd-embedded") == s.matrix.cells  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("cell", "words"),
    [
        ('topology = "colocated"\nprefill.args = ["-x"]', r"field matrix.cells\[1\]: a colocated cell is one engine"),
        ('topology = "reload"\nprefill.args = ["-x"]', r"field matrix.cells\[1\].prefill: mode 'reload' is one engine"),
        ('topology = "reload"\ndecoder_direct = true', r"field matrix.cells\[1\].decoder_direct: needs topology 'pd'"),
        ('topology = "colocated"\nconnector = "example"', r"cells\[1\].connector: a colocated cell is one"),
        ('topology = "pd"\nconnector = "example"', r"connector 'example' is not one embedded speaks here"),
        ('topology = "pd"\nprefill.args = ["--kv-transfer-config", "{}"]', r"topology.prefill.args has --kv-transfer"),
    ],
)
def test_cell_topology_mistakes_fail_before_any_cell_runs(tmp_path: Path, cell: str, words: str) -> None:
    launcher = '[launcher]\nkind = "vllm"\nmodel = "m"\n' if "kv-transfer" in cell else ""
    scenario = tmp_path / "m.toml"
    scenario.write_text(
        f'name = "m"\n[[canaries]]\nprompt = "hi"\n{launcher}[[matrix.cells]]\nname = "a"\n[[matrix.cells]]\n'
        f'name = "b"\n{cell}\n'
    )
    with pytest.raises(ScenarioError, match=words):
        run_matrix(scenario, out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_cold_boot_matrix_refuses_a_topology_cell(tmp_path: Path) -> None:
    scenario = tmp_path / "m.toml"
    scenario.write_text(
        'name = "m"\n[[canaries]]\nprompt = "hi"\n[cold_boot]\n[[matrix.cells]]\nname = "a"\n'
        '[[matrix.cells]]\nname = "b"\ntopology = "pd"\n'
    )
    with pytest.raises(ScenarioError, match=r"field matrix.cells\[1\].topology: a cold-boot study restarts one engine"):
        run_matrix(scenario, out_dir=tmp_path / "out")
