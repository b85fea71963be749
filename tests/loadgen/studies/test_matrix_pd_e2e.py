"""The shipped prefill/decode matrix for real: ``loadgen matrix pd-embedded`` on two embedded engines behind the
real vllm-router per P/D cell, as short as still proves the claim (two levels, two canaries per level).

Claims checked in its ``comparison.json``: a batch-invariant prefiller breaks the colocated engine's reference for
the D3 short prompt, at token 4, where the same-kernel prefiller (alone, at the baseline) does not, and neither
touches the long control; the decoder asked directly after the P/D sweep answers otherwise than before it (its
prefix cache kept the foreign KV it received), and after a reset as before. Also: each P/D run records its two
servers with their roles and shows per-side co-residency; every cell's run folder (the phased cell's folder) has
the log of every process it started; once the command is done nothing listens on any of their ports.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from loadgen.core.manifest import read_manifest
from tests.loadgen.engine.pd_processes import router_available

pytestmark = pytest.mark.skipif(not router_available(), reason="vllm-router is not installed (pip install '.[test]')")

CELLS = ["colocated", "pd-same-kernel", "pd-foreign-prefill", "colocated-prefix-cache", "decoder-direct"]
PD_LOGS = {"engine-prefill.log", "engine-decode.log", "router.log"}


def _listening(url: str) -> bool:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def test_the_foreign_prefill_cell_breaks_the_reference_where_the_same_kernel_cell_does_not(tmp_path: Path) -> None:
    out = tmp_path / "pd"
    cmd = [sys.executable, "-m", "loadgen", "matrix", "pd-embedded", "--out", str(out), "--quiet"]
    cmd += ["--cells", ",".join(CELLS), "--levels", "0,2", "--canaries-per-level", "2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr

    cmp = orjson.loads((out / "comparison.json").read_bytes())
    refs = {(r["run"], r["canary"]): r for r in cmp["references"]}
    foreign = refs[("pd-foreign-prefill", "d3-short")]
    assert (foreign["compared_with"], foreign["verdict"], foreign["first_divergence"]) == ("colocated", "diverged", 4)
    assert refs[("pd-foreign-prefill", "d3-long")]["verdict"] == "same"
    assert {refs[("pd-same-kernel", c)]["verdict"] for c in ("d3-short", "d3-long")} == {"same"}
    before, after, reset = (f"decoder-direct/decoder-{p}" for p in ("before", "after", "after-reset"))
    assert refs[(before, "d3-short")]["compared_with"] == "colocated-prefix-cache"
    assert refs[(before, "d3-short")]["verdict"] == "same"  # the decoder's own prefill, its own cache
    assert (refs[(after, "d3-short")]["compared_with"], refs[(after, "d3-short")]["verdict"]) == (before, "diverged")
    assert refs[(reset, "d3-short")]["verdict"] == "same"
    md = (out / "comparison.md").read_text()
    assert "pd-foreign-prefill's reference differs from colocated's: d3-short at token 4" in md

    matrix = orjson.loads((out / "matrix.json").read_bytes())
    urls: list[str] = []
    for cell in matrix["cells"]:
        run_dir = Path(cell["run_dir"])
        manifest = read_manifest(run_dir)
        servers = manifest.scenario["endpoint"]["servers"]
        urls += [str(manifest.endpoint.base_url), *(s["base_url"] for s in servers)]
        names = {p.name for p in run_dir.iterdir()}
        if cell["name"].startswith("colocated"):
            assert servers == [] and "engine.log" in names
            continue
        assert [(s["name"], s["role"]) for s in servers] == [("prefill", "prefill"), ("decode", "decode")]
        kept = run_dir.parent if cell["phases"] else run_dir  # a phased cell keeps its logs beside its phases
        logs = {p.name for p in kept.iterdir()}
        assert logs >= PD_LOGS, logs
        assert all("READY http://" in kept.joinpath(n).read_text() for n in ("engine-prefill.log", "engine-decode.log"))
        report = orjson.loads((run_dir / "report.json").read_bytes())
        assert all("sides" in c for c in report["canaries"])  # per-side co-residency, both canaries
        assert "prefill-side" in (run_dir / "report.md").read_text()
        assert "prefill" in (run_dir / "report.html").read_text()
    assert [p["name"] for p in matrix["cells"][-1]["phases"]] == [
        "decoder-before",
        "decoder-after",
        "decoder-after-reset",
    ]
    assert not [u for u in urls if _listening(u)]  # every engine and router of every cell stopped
