"""Through the real CLI: a run whose canaries all fail says why, in one line, and gives no verdict.

The fault server answers a canary prompt ``status:400`` with a JSON error (``injected 400``) and ``html:404`` with a
14-line HTML page; the probe's own prompt is answered, so the run starts and every canary fails. The headline
must name the kind with a count that does not read as an HTTP status, and quote the server's first reason (an
HTML page said as such, not pasted); the verdict must not count "0 canaries" beside the errors, nor find "no
divergence" where nothing completed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.loadgen.cli import clikit

FAILING = """
name = "failing"
[endpoint]
base_url = "{url}"
read_timeout_s = 5
[[canaries]]
id = "c"
prompt = "{prompt}"
[sweep]
levels = [0]
canaries_per_level = 3
warmup = 0
baseline = 2
settle_timeout_s = 0.5
"""


@pytest.mark.parametrize(
    ("prompt", "reason"), [("status:400", "HTTP 400: injected 400"), ("html:404", "HTTP 404: an HTML page")]
)
def test_every_canary_failed_says_the_first_reason_in_one_line(
    fault_server: str, tmp_path: Path, prompt: str, reason: str
) -> None:
    done = clikit.loadgen_run(FAILING.format(url=fault_server, prompt=prompt), tmp_path / "runs")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "run endpoint_failed" and lines[-1] == str(done.run_dir)
    assert lines[1] == (
        f"Endpoint failed: 5 of 5 canaries failed (http_status ×5; the first: {reason}); "
        "no completions at concurrency 0."
    )
    assert "<" not in done.stdout  # no HTML pasted
    assert "no completions: all 3 canaries of the sweep failed; no verdict" in done.stdout
    assert "over 0 canaries" not in done.stdout and "no divergence" not in done.stdout
