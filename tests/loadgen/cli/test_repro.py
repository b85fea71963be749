"""``loadgen repro`` through the real CLI: a run on the embedded engine, the reproducer, then its replay.

The engine is served with a low ``--logit-scale`` (near-ties everywhere), so canaries diverge under load;
the run names an API-key variable holding a fake key (the embedded engine ignores auth), and no file of
the reproducer may hold that key.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from collectors.jsonl import read_jsonl
from loadgen.core.scenario import load_scenario
from reports.repro.folder import FILES
from tests.loadgen.cli.clikit import loadgen as in_process
from tests.reports.runkit import rec, write_run

KEY_ENV = "LOADGEN_REPRO_TEST_KEY"
KEY = f"lgrepro-{uuid.uuid4().hex}"  # distinctive: a hit can only be a leak
SCENARIO = f"""
name = "repro-e2e"
[endpoint]
api_key_env = "{KEY_ENV}"
[[canaries]]
id = "story"
prompt = "Write a short story about a lighthouse keeper who finds a strange stone on the shore near the old town"
max_tokens = 32
[background]
prompt_words = [8, 40]
max_tokens = [16, 48]
[sweep]
levels = [4]
canaries_per_level = 4
warmup = 1
baseline = 2
"""


def loadgen(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, KEY_ENV: KEY}
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture(scope="module")
def noisy_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from loadgen.launchers.process import start_embedded

    log = tmp_path_factory.mktemp("engine") / "engine.log"
    with start_embedded(["--logit-scale=1.0"], log_path=log) as engine:
        yield engine.url


def test_repro_of_a_real_run_and_its_replay(noisy_engine: str, tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO)
    ran = loadgen("run", str(scenario), "--host", noisy_engine, "--out", str(tmp_path / "runs"))
    assert ran.returncode == 0, ran.stderr
    run_dir = Path(ran.stdout.strip().splitlines()[-1])
    rows = read_jsonl(run_dir / "canaries.jsonl").rows

    out = loadgen("repro", str(run_dir), "--canary", "story")
    defaulted = out.returncode == 0
    if out.returncode == 2 and "none diverged" in out.stderr:  # rare on this engine: pick the last record instead
        out = loadgen("repro", str(run_dir), "--canary", "story", "--record", str(len(rows)))
    assert out.returncode == 0, out.stderr
    folder = Path(out.stdout.strip().removeprefix("wrote "))
    assert folder.parent == run_dir and folder.name.startswith("repro-story-")
    assert sorted(p.name for p in folder.iterdir()) == sorted(FILES)

    completion = orjson.loads((folder / "completion.json").read_bytes())
    n = completion["record"]
    assert folder.name == f"repro-story-{n}" and completion["records"] == len(rows)
    ordered = sorted(rows, key=lambda r: (r["sent_at"], r["request_id"]))
    record = ordered[n - 1]
    assert completion["this"]["request_id"] == record["request_id"]
    ref_id = orjson.loads((run_dir / "report.json").read_bytes())["canaries"][0]["reference"]["request_id"]
    ref_ids = next(r for r in rows if r["request_id"] == ref_id)["token_ids"]
    assert completion["reference"]["record"]["request_id"] == ref_id  # the report's reference
    if defaulted:  # the first record that diverged from it, in send order
        earlier = [r for r in ordered[: n - 1] if r["phase"] != "warmup" and r["status"] == "ok"]
        assert all(r["token_ids"] == ref_ids for r in earlier) and record["token_ids"] != ref_ids
        assert completion["first_divergence"] is not None
        print(f"default record {n}: first divergence at token {completion['first_divergence']}")
    # the exact body as sent, and nothing else from the request: no header, no key
    assert orjson.loads((folder / "request.json").read_bytes()) == record["request"]
    for path in [*folder.iterdir(), *run_dir.iterdir()]:
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    assert orjson.loads((folder / "endpoint.json").read_bytes())["api_key_env"] == KEY_ENV
    load = orjson.loads((folder / "in_flight.json").read_bytes())
    if record["phase"] == "sweep":
        assert load["level"] == 4 and load["background"]["overlapping"] >= 1
        assert load["engine_batch_sizes"] == record["engine_batch_sizes"]
    readme = (folder / "README.md").read_text()
    assert f"record {n} of {len(rows)}" in readme and "replay.sh" in readme

    replay = load_scenario(folder / "replay.toml")
    assert replay.canaries[0].prompt == record["request"]["prompt"]
    assert replay.endpoint.api_key_env is None and replay.endpoint.base_url is None  # named where it is replayed
    assert replay.sweep.levels == [record["level"] if record["phase"] == "sweep" else 0]
    assert tomllib.loads((folder / "replay.toml").read_text())["labels"]["repro_of"] == run_dir.name

    # the README's set-up installs into a virtualenv it never activates: no loadgen on PATH, no $LOADGEN
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path)), KEY_ENV: KEY}
    again = subprocess.run(
        [
            "sh",
            str(folder / "replay.sh"),
            noisy_engine,
            "--api-key-env",
            KEY_ENV,
            "--out",
            str(tmp_path / "replays"),
            "--canaries-per-level",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert again.returncode == 0, again.stderr
    replay_dir = Path(again.stdout.strip().splitlines()[-1])
    assert replay_dir.parent == tmp_path / "replays"
    replayed = [r for r in read_jsonl(replay_dir / "canaries.jsonl").rows if r["phase"] == "sweep"]
    assert len(replayed) == 2 and all(
        r["canary_id"] == "story" and r["level"] == replay.sweep.levels[0] for r in replayed
    )
    # the same canary request again: the body the original run recorded, byte for byte as JSON
    assert all(r["request"] == record["request"] for r in replayed)
    for path in replay_dir.iterdir():
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_a_run_on_the_engine_loadgen_started_replays_it_once_its_command_is_approved(tmp_path: Path) -> None:
    """No URL: the run's own embedded engine, with its arguments, through the replay's ``[launcher]``; the
    replay shows its command and starts it only with ``$LOADGEN_APPROVE_ENGINE`` set to the digest it printed."""
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        SCENARIO.replace("levels = [4]", "levels = [2]").replace("canaries_per_level = 4", "canaries_per_level = 1")
    )
    ran = loadgen("run", str(scenario), "--engine-arg=--logit-scale=1.0", "--out", str(tmp_path / "runs"), "--quiet")
    assert ran.returncode == 0, ran.stderr
    run_dir = Path(ran.stdout.strip().splitlines()[-1])
    rows = read_jsonl(run_dir / "canaries.jsonl").rows
    out = loadgen("repro", str(run_dir), "--canary", "story", "--record", str(len(rows)))
    assert out.returncode == 0, out.stderr
    folder = Path(out.stdout.strip().removeprefix("wrote "))
    replay = load_scenario(folder / "replay.toml")
    assert replay.launcher is not None and replay.launcher.require_approval
    assert replay.launcher.kind == "embedded" and replay.launcher.args == ["--logit-scale=1.0"]

    env = {**os.environ, KEY_ENV: KEY}
    env.pop("LOADGEN_APPROVE_ENGINE", None)
    replays = tmp_path / "replays"
    sh = ["sh", str(folder / "replay.sh"), "--out", str(replays), "--quiet"]
    refused = subprocess.run(sh, capture_output=True, text=True, timeout=60, env=env)
    assert refused.returncode == 2, refused.stderr
    shown = f"{sys.executable} -P -m loadgen.engine --host 127.0.0.1 --port 0 --logit-scale=1.0"
    assert f"exact command:\n{shown}\n" in refused.stderr and f"\n    {shown}\n" in (folder / "README.md").read_text()
    digest = refused.stderr.split("LOADGEN_APPROVE_ENGINE=", 1)[1].split()[0]
    again = subprocess.run(
        sh, capture_output=True, text=True, timeout=180, env={**env, "LOADGEN_APPROVE_ENGINE": digest}
    )
    assert again.returncode == 0, again.stderr
    replay_dir = Path(again.stdout.strip().splitlines()[-1])
    engine = orjson.loads((replay_dir / "manifest.json").read_bytes())["engine"]
    assert engine["kind"] == "embedded" and engine["command"].endswith(" --port 0 --logit-scale=1.0")
    assert [r["canary_id"] for r in read_jsonl(replay_dir / "canaries.jsonl").rows if r["phase"] == "sweep"]
    the_readme_s_curl_reaches_the_engine_it_starts_first(folder)


def the_readme_s_curl_reaches_the_engine_it_starts_first(folder: Path) -> None:
    """The run's engine is gone with its run: the README starts the same one (``loadgen serve``, the run's
    arguments), points ``$BASE_URL`` at it and sends ``request.json`` there with curl, twice as it says, the second
    answer the reference (sent alone after a warm-up, as the baseline was). The serve line runs here on a free port
    instead of 8000."""
    readme = (folder / "README.md").read_text()
    block = readme.split("## What was sent", 1)[1].split("```sh\n", 1)[1].split("\n```", 1)[0].splitlines()
    serve, base, curl = block
    assert serve == "loadgen serve --port 8000 --logit-scale=1.0  # in another terminal: the run's engine"
    assert base == "BASE_URL=http://127.0.0.1:8000" and curl.startswith('curl -s "$BASE_URL"/v1/completions ')
    args = shlex.split(serve, comments=True)[1:]
    cmd = [sys.executable, "-m", "loadgen", *args[: args.index("--port") + 1], "0", *args[args.index("--port") + 2 :]]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as engine:
        try:
            assert engine.stdout is not None
            url = next(line for line in engine.stdout if line.startswith("READY ")).split()[1]
            script = "\n".join([base.replace("http://127.0.0.1:8000", url), f"{curl} >/dev/null", curl])
            sent = subprocess.run(["sh", "-c", script], cwd=folder, capture_output=True, text=True, timeout=60)
        finally:
            engine.terminate()
    assert sent.returncode == 0, sent.stderr
    reference = orjson.loads((folder / "completion.json").read_bytes())["reference"]["record"]
    assert orjson.loads(sent.stdout)["choices"][0]["text"] == reference["text"]


def test_bad_input_exits_2_naming_the_folder_the_option_and_what_was_expected(tmp_path: Path) -> None:
    missing = in_process("repro", str(tmp_path / "nothing"), "--canary", "story")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr == (
        f"loadgen repro: error: RUN_DIR: {tmp_path / 'nothing'}: not a directory (expected a run folder with "
        "manifest.json)\n"
    )
    run_dir = write_run(tmp_path / "run", [rec([1, 2], phase="baseline"), rec([1, 2], level=1)])
    unknown = in_process("repro", str(run_dir), "--canary", "nope")
    assert unknown.returncode == 2
    assert unknown.stderr == (
        f"loadgen repro: error: {run_dir}: --canary 'nope': no such canary in this run (expected one of: c0)\n"
    )
    beyond = in_process("repro", str(run_dir), "--canary", "c0", "--record", "3")
    assert (
        beyond.returncode == 2 and f"{run_dir}: --record 3: canary 'c0' has 2 record(s) (expected 1..2" in beyond.stderr
    )
    same = in_process("repro", str(run_dir), "--canary", "c0")
    assert (
        same.returncode == 2
        and "none diverged from the reference" in same.stderr
        and "--record N (1..2)" in same.stderr
    )
    assert not any(p.name.startswith("repro-") for p in run_dir.iterdir())
