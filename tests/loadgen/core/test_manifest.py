"""Pins the keys of ``manifest.json`` (outside tools read them: docs/design.md) and how the file is rewritten:
a misspelt field is refused before anything is written, and keys this version does not know are kept."""

import re
from pathlib import Path

import orjson
import pytest

from loadgen.core.errors import RunFolderError
from loadgen.core.manifest import (
    FIELDS,
    MANIFEST,
    MANIFEST_SCHEMA,
    Manifest,
    read_manifest,
    update_manifest,
    write_manifest,
)

CONTRACT_KEYS = {
    "schema",
    "tool",
    "run_id",
    "scenario_path",
    "scenario",
    "endpoint",
    "server",
    "features",
    "labels",
    "levels",
    "canaries_per_level",
    "host",
    "started",
    "finished",
    "status",
    "engine",
    "step_trace_requested",
    "stages_finished",
    "canaries_reported",
    "canary_errors",
    "canary_errors_trailing",
    "unsettled_levels",
    "levels_ended_by_claim",
    "levels_ended_by_background",
    "workers",
    "workers_vanished",
    "engine_metrics",
    "servers",
    "notices",
    "cold_boot",
    "boots",
}
DESIGN = Path(__file__).resolve().parents[3] / "docs" / "design.md"


def documented_keys() -> set[str]:
    """The keys named in the first column of docs/design.md's manifest table."""
    section = DESIGN.read_text(encoding="utf-8").split("## The manifest (`manifest.json`)", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {key for cell in rows for key in re.findall(r"`([a-z_]+)`", cell)}


def prepared(tmp_path: Path, **fields: object) -> Path:
    write_manifest(tmp_path, Manifest.model_validate({"schema": MANIFEST_SCHEMA, "run_id": "r", **fields}))
    return tmp_path


def on_disk(run_dir: Path) -> dict[str, object]:
    data = orjson.loads((run_dir / MANIFEST).read_bytes())
    assert isinstance(data, dict)
    return data


def test_the_fields_are_the_contract_and_every_one_is_written(tmp_path: Path) -> None:
    assert FIELDS == CONTRACT_KEYS
    assert set(on_disk(prepared(tmp_path))) == CONTRACT_KEYS


def test_design_documents_exactly_the_contract_keys() -> None:
    assert documented_keys() == CONTRACT_KEYS


def test_a_misspelt_field_raises_and_writes_nothing(tmp_path: Path) -> None:
    run_dir = prepared(tmp_path)
    before = (run_dir / MANIFEST).read_bytes()
    with pytest.raises(TypeError, match=r"'canaries_reportd' \(did you mean 'canaries_reported'\?\)"):
        update_manifest(run_dir, canaries_reported=3, canaries_reportd=3)
    assert (run_dir / MANIFEST).read_bytes() == before
    assert sorted(p.name for p in run_dir.iterdir()) == [MANIFEST]


def test_unknown_keys_read_from_an_older_folder_are_kept_on_rewrite(tmp_path: Path) -> None:
    old = {
        "schema": MANIFEST_SCHEMA,
        "run_id": "r",
        "from_a_newer_tool": {"x": [1, 2]},
        "engine_metrics": {"interval_s": 0.5, "samples": 3, "per_gauge": {"running": 3}},  # no max_gap_s, gaps
        "scenario": {"sweep": {"claim_max_rate": None, "warmup": 2}, "canaries": [{"id": "c", "prompt": "p"}]},
        "server": {"version": "1.0", "config": {"settings": {"prefix_caching": True, "speculative": "ngram"}}},
    }
    (tmp_path / MANIFEST).write_bytes(orjson.dumps(old))
    update_manifest(tmp_path, canaries_reported=4)
    after = on_disk(tmp_path)
    assert after["from_a_newer_tool"] == {"x": [1, 2]}
    assert after["engine_metrics"] == old["engine_metrics"]  # nothing added, nothing dropped
    assert after["scenario"] == old["scenario"]
    assert after["server"] == old["server"]
    assert after["canaries_reported"] == 4
    assert read_manifest(tmp_path).scenario["canaries"][0]["id"] == "c"


def test_a_field_of_the_wrong_shape_is_named(tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_bytes(orjson.dumps({"schema": MANIFEST_SCHEMA, "boots": [{"boot": "first"}]}))
    with pytest.raises(RunFolderError, match=r"field boots\.0\.boot"):
        read_manifest(tmp_path)
