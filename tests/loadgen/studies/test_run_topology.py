"""``loadgen run`` of a prefill/decode topology that cannot start, through the real CLI: one error naming the part
and its role with its log tail, exit 2, no run folder, and every log it wrote kept where run folders go."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.loadgen.cli.clikit import loadgen_run
from tests.loadgen.engine.pd_processes import router_available

pytestmark = pytest.mark.skipif(not router_available(), reason="vllm-router is not installed (pip install '.[test]')")

SCENARIO = 'name = "pd"\n[[canaries]]\nprompt = "hi"\n[topology]\nmode = "pd"\n'


@pytest.mark.parametrize(
    ("part", "says", "logs"),
    [
        (
            '[topology.prefill]\nargs = ["--max-num-seqs", "0"]\n',
            ["the prefill server (role prefill) did not start: engine exited before it was ready", "must be positive"],
            {"engine-prefill.log"},
        ),
        (
            '[topology.router]\nargs = ["--bogus"]\n',
            ["the router (vllm-router, in front of prefill http://127.0.0.1:", "exited with code 2", "--bogus"],
            {"engine-prefill.log", "engine-decode.log", "router.log"},
        ),
    ],
    ids=["prefill-exits", "router-refuses"],
)
def test_a_topology_that_cannot_start_names_the_part_and_keeps_its_logs(
    tmp_path: Path, part: str, says: list[str], logs: set[str]
) -> None:
    out = tmp_path / "runs"
    done = loadgen_run(SCENARIO + part, out)
    assert done.returncode == 2, done.stderr
    assert all(s in done.stderr for s in says), done.stderr
    assert {p.name for p in out.iterdir()} == {*logs, "engine-failed.txt"}  # no run folder, no temporary folder
    if "router" in part:  # its parser refused an argument: that one line, not its usage (its log is kept all the same)
        assert "refusing its arguments: " in done.stderr and "usage:" not in done.stderr
    else:  # the kept log, not the temporary one it was written to
        assert f"log tail ({out / 'engine-prefill.log'})" in done.stderr
