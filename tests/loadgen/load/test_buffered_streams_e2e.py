"""A real ``loadgen run`` against an endpoint whose streams come in one piece (the fault server's ``/buffered``:
each answer 0.3 s late and whole, as a buffering proxy in front of an engine sends it).

No background slot is ever past its first token for more than an instant there, so the held-level gate used
to wait ``settle_timeout_s`` (10 s here, the default) for every canary above level 0 and send it flagged not
held. Now the load side sees the streams come in one piece and holds the level from each request's send, a
slot sending its next request once the last has ended (the level a ceiling; the fault server has no
``/metrics`` for a request without a key: the send is the witness): every canary
goes out held, no level is unsettled, and the progress output (once), the manifest and the report say why
and what to do. The same run shows the two "held" figures under their two names.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.loadgen.cli.clikit import loadgen_run

SCENARIO = """
name = "buffered"
[[canaries]]
id = "c"
prompt = "ok"
max_tokens = 3
logprobs = true
[background]
seed = 3
prompt_words = [4, 8]
max_tokens = [3, 8]
[sweep]
levels = [0, 2, 4]
canaries_per_level = 3
warmup = 0
baseline = 2
"""


@pytest.fixture(scope="module")
def buffered_run(fault_server: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """One real ``loadgen run`` against ``/buffered``: its run folder, standard output and standard error."""
    tmp = tmp_path_factory.mktemp("buffered")
    done = loadgen_run(SCENARIO, tmp / "runs", "--host", f"{fault_server}/buffered", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.run_dir, done.stdout, done.stderr


def test_a_buffered_stream_holds_levels_from_the_send_and_says_so(buffered_run: tuple[Path, str, str]) -> None:
    run_dir, _, stderr = buffered_run
    records = [orjson.loads(line) for line in (run_dir / "canaries.jsonl").read_bytes().splitlines()]
    loaded = [r for r in records if r["phase"] == "sweep" and r["level"] > 0]
    assert len(loaded) == 6
    for r in loaded:  # a canary that waited settle_timeout_s out would say held_at_send false
        assert r["held_at_send"] is True and r["background_held_at_send"] == r["level"], r
    assert loaded[-1]["background_buffered"] is True
    # from the switch on the level is a ceiling (docs/design.md, "The level's band"): no token says when an answer
    # is about to end, so a slot sends its next request once the last has ended, never beside it
    for r in loaded:
        assert r["level_bound"] == ("ceiling" if r["background_buffered"] else "floor"), r
        if r["background_buffered"]:
            assert r["inflight_at_send"] <= r["level"], r
    assert all(r["background_buffered"] is None for r in records if r["level"] == 0)
    manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    assert manifest["unsettled_levels"] == []
    said = [n for n in manifest["notices"] if n.startswith("Streamed background came in one piece")]
    assert len(said) == 1 and "proxy_buffering off" in said[0]
    report = (run_dir / "report.md").read_text()
    assert report.count("Streamed background came in one piece") == 1
    assert stderr.count("the background's streams come in one piece") == 1, stderr


def test_the_two_held_figures_have_two_names(buffered_run: tuple[Path, str, str]) -> None:
    """Progress says "held at send" (slots held when the stage's last canary went out, of the level); the
    report, its HTML and the terminal's table at the end say "held throughout" (canaries whose level held for
    their whole life). Neither says a bare "held"."""
    run_dir, stdout, stderr = buffered_run
    assert "level 2 done: canaries 3/3" in stderr and "held at send 2/2;" in stderr and "held at send 4/4;" in stderr
    assert ", held " not in stderr.replace(", held at send ", "")
    for text in (stdout, (run_dir / "report.md").read_text()):
        assert "| others min/med/max | held throughout |" in text
        assert "| held |" not in text
    assert "<th>held throughout</th>" in (run_dir / "report.html").read_text()
