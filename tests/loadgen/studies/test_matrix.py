"""Engine matrices: the shipped D3 2x2 on the embedded engine, a sweep matrix, and the checks before any cell."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loadgen.core.errors import ScenarioError
from loadgen.core.manifest import read_manifest
from loadgen.core.scenario import LauncherSpec, MatrixCell, load_scenario
from loadgen.engine.prompts import D3_LONG_PROMPT, D3_MAX_TOKENS, D3_SHORT_PROMPT
from loadgen.studies.matrix import cell_launcher, run_matrix
from scenarios import path_of


def test_shipped_d3_scenario_sends_the_engines_documented_prompts() -> None:
    s = load_scenario(path_of("d3-2x2"))
    assert [(c.id, c.prompt, c.max_tokens) for c in s.canaries] == [
        ("short", D3_SHORT_PROMPT, D3_MAX_TOKENS),
        ("long", D3_LONG_PROMPT, D3_MAX_TOKENS),
    ]


def test_d3_matrix_shows_first_request_divergence_only_with_prefix_caching_on_and_invariance_off(
    tmp_path: Path,
) -> None:
    result = run_matrix(path_of("d3-2x2"), out_dir=tmp_path, boots=2, requests=3)
    assert result.ok and result.mode == "cold_boot"
    table = {
        (cell.name, c["id"]): (
            c["first_differs_rest_agree"],
            c["boots_counted"],
            c["distinct_first"],
            c["distinct_warm"],
        )
        for cell in result.cells
        for c in (cell.coldboot["canaries"] if cell.coldboot else [])
    }
    assert table.pop(("apc-on_invariant-0", "short")) == (2, 2, 1, 1)
    assert set(table.values()) == {(0, 2, 1, 1)} and len(table) == 7
    md = (tmp_path / "matrix.md").read_text()
    assert "| apc-on_invariant-0 | 2 / 2 | 1 / 1 | 0 / 2 | 1 / 1 |" in md
    assert "| apc-off_invariant-1 | 0 / 2 | 1 / 1 | 0 / 2 | 1 / 1 |" in md
    cmp = orjson.loads((tmp_path / "comparison.json").read_bytes())
    assert [r["name"] for r in cmp["runs"]] == [c.name for c in result.cells]
    manifest = read_manifest(result.cells[3].run_dir)  # type: ignore[arg-type]
    assert manifest.labels["prefix_caching"] == "off" and manifest.labels["batch_invariant"] == "1"
    assert manifest.engine is not None and isinstance(command := manifest.engine["command"], str)
    assert command.endswith("--no-enable-prefix-caching --batch-invariant")


def test_sweep_matrix_over_external_endpoints_ends_in_one_comparison(fault_server: str, tmp_path: Path) -> None:
    scenario = tmp_path / "m.toml"
    scenario.write_text(f"""
name = "m"
[[canaries]]
id = "c"
prompt = "hello"
max_tokens = 4
[sweep]
levels = [0, 1]
canaries_per_level = 2
warmup = 0
baseline = 1
[[matrix.cells]]
name = "one"
base_url = "{fault_server}"
labels = {{ side = "a" }}
[[matrix.cells]]
name = "two"
base_url = "{fault_server}"
""")
    result = run_matrix(scenario, out_dir=tmp_path / "out", labels={"who": "t"})
    assert result.ok and result.mode == "sweep" and [c.coldboot for c in result.cells] == [None, None]
    assert read_manifest(result.cells[0].run_dir).labels == {"who": "t", "cell": "one", "side": "a"}  # type: ignore[arg-type]
    cmp = orjson.loads((tmp_path / "out" / "comparison.json").read_bytes())
    assert [r["name"] for r in cmp["runs"]] == ["one", "two"] and cmp["canaries"][0]["id"] == "c"
    assert "| one | who=t, cell=one, side=a | finished |" in (tmp_path / "out" / "matrix.md").read_text()


def test_cells_append_args_and_merge_env_over_the_launcher() -> None:
    base = LauncherSpec(kind="vllm", model="m", args=["--seed", "0"], env={"VLLM_BATCH_INVARIANT": "0", "A": "1"})
    cell = MatrixCell(name="x", args=["--no-enable-prefix-caching"], env={"VLLM_BATCH_INVARIANT": "1"})
    merged = cell_launcher(base, cell)
    assert merged is not None and merged.args == ["--seed", "0", "--no-enable-prefix-caching"]
    assert merged.env == {"VLLM_BATCH_INVARIANT": "1", "A": "1"} and merged.model == "m"
    assert cell_launcher(None, MatrixCell(name="e", base_url="http://h:1")) is None
    assert cell_launcher(None, cell) == LauncherSpec(args=cell.args, env=cell.env)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ("", r"no \[matrix\] section"),
        (
            '[cold_boot]\n[[matrix.cells]]\nname = "a"\nbase_url = "http://127.0.0.1:9"\n'
            '[[matrix.cells]]\nname = "b"\n',
            r"field matrix.cells\[0\].base_url: a cold-boot study restarts",
        ),
        (
            '[endpoint]\nbase_url = "http://127.0.0.1:9"\n[[matrix.cells]]\nname = "a"\n[[matrix.cells]]\nname = "b"\n',
            r"field matrix.cells\[0\]: endpoint.base_url is set",
        ),
    ],
)
def test_matrix_mistakes_fail_before_any_cell_runs(tmp_path: Path, extra: str, words: str) -> None:
    scenario = tmp_path / "m.toml"
    scenario.write_text('name = "m"\n[[canaries]]\nprompt = "hi"\n' + extra)
    with pytest.raises(ScenarioError, match=words):
        run_matrix(scenario, out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()
