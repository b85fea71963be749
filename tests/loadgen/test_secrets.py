"""API keys: read from the environment, sent only to the configured host, written nowhere.

Real runs against ``fault_server.py --require-key``: the server must see the key on every request,
and no file in the run folder (records, manifest, Locust's log, CSV and HTML, reports) may hold it,
even where the server echoes it back (``/echo``, ``/hostile``: the key must not reach the terminal either).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.errors import EndpointError, ScenarioError
from loadgen.core.manifest import read_manifest
from loadgen.core.request import RunRequest
from loadgen.core.scenario import parse_scenario
from loadgen.studies.run import run
from tests.loadgen.cli.clikit import loadgen
from tests.loadgen.serve_app import script_server, seen

FAULT_SERVER = Path(__file__).with_name("fault_server.py")
KEY = f"lgtest-{uuid.uuid4().hex}"  # distinctive: a hit can only be a leak
ENV = "LOADGEN_TEST_API_KEY"


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[str, str]]:
    """A server that wants ``KEY``, and a keyless one that only watches what reaches it."""
    with script_server(FAULT_SERVER, "--require-key", KEY) as keyed_url, script_server(FAULT_SERVER) as other_url:
        yield keyed_url, other_url


def scenario(tmp_path: Path, base_url: str, *, key_env: str | None = ENV) -> Path:
    key_line = f'api_key_env = "{key_env}"\n' if key_env else ""
    path = tmp_path / "keyed.toml"
    path.write_text(f"""
name = "keyed"
[endpoint]
base_url = "{base_url}"
{key_line}
[[canaries]]
id = "plain"
prompt = "ok"
[[canaries]]
id = "streamed"
prompt = "ok"
stream = true
[[canaries]]
id = "refused"
prompt = "status:500"
[sweep]
levels = [0, 2]
canaries_per_level = 2
warmup = 1
baseline = 1
# this server's background ends at once, so level 2 is never held: wait 0.5 s for it, not 10
settle_timeout_s = 0.5
""")
    return path


def files_under(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_key_reaches_the_server_and_no_file(
    servers: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keyed, _ = servers
    monkeypatch.setenv(ENV, KEY)
    before = seen(keyed)
    result = run(RunRequest(scenario(tmp_path, keyed), out_dir=tmp_path / "runs", report=True))
    assert result.status == "finished" and result.locust_exit == 0

    after = seen(keyed)
    sent = {k: n - before["authorization"].get(k, 0) for k, n in after["authorization"].items()}
    assert {k for k, n in sent.items() if n} == {f"Bearer {KEY}"}, "a request went out without the key"
    assert after["requests"]["POST /v1/completions"] - before["requests"].get("POST /v1/completions", 0) > 20

    files = files_under(result.run_dir)
    assert {"manifest.json", "canaries.jsonl", "background.jsonl", "locust.log", "locust.html"} <= set(files)
    assert any(name.startswith("report") for name in files), sorted(files)
    leaks = [name for name, data in files.items() if KEY.encode() in data]
    assert leaks == [], f"the API key was written to {leaks}"
    manifest = read_manifest(result.run_dir)
    assert manifest.endpoint.api_key_env == ENV  # the variable's name is evidence; its value is not
    assert b'"status":"ok"' in files["canaries.jsonl"] and b'"status":"error"' in files["canaries.jsonl"]


def test_keyed_endpoint_without_key_names_api_key_env(
    servers: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keyed, _ = servers
    monkeypatch.delenv(ENV, raising=False)
    out_dir = tmp_path / "runs"
    with pytest.raises(EndpointError) as info:
        run(RunRequest(scenario(tmp_path, keyed, key_env=None), out_dir=out_dir, report=False))
    msg = str(info.value)
    assert f"{keyed}/v1/models: HTTP 401" in msg and "wants an API key" in msg and "endpoint.api_key_env" in msg
    assert not out_dir.exists()


def test_wrong_key_is_refused_and_not_echoed(
    servers: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keyed, _ = servers
    wrong = f"wrong-{uuid.uuid4().hex}"
    monkeypatch.setenv(ENV, wrong)
    out_dir = tmp_path / "runs"
    with pytest.raises(EndpointError) as info:
        run(RunRequest(scenario(tmp_path, keyed), out_dir=out_dir, report=False))
    msg = str(info.value)
    assert f"{keyed}/v1/models: HTTP 401" in msg and "refused the API key" in msg and "endpoint.api_key_env" in msg
    assert wrong not in msg and KEY not in msg
    assert not out_dir.exists()


def test_redirect_does_not_carry_the_key_to_another_host(
    servers: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keyed, other = servers
    monkeypatch.setenv(ENV, KEY)
    other_port = other.rsplit(":", 1)[1]
    before = seen(other)
    out_dir = tmp_path / "runs"
    with pytest.raises(EndpointError) as info:
        run(RunRequest(scenario(tmp_path, f"{keyed}/to/{other_port}"), out_dir=out_dir, report=False))
    assert seen(other) == before, "the redirect target was contacted"
    msg = str(info.value)
    assert f"{keyed}/to/{other_port}/v1/models: HTTP 307 redirect to {other}/v1/models" in msg
    assert "redirects are not followed" in msg and KEY not in msg
    assert not out_dir.exists()


def _error(endpoint: dict[str, str]) -> str | None:
    """The scenario error for this endpoint table, or None when it validates."""
    try:
        parse_scenario({"endpoint": endpoint, "canaries": [{"prompt": "p"}]}, "s.toml")
    except ScenarioError as exc:
        return str(exc)
    return None


BASE = "http://127.0.0.1:8000"
NAME_ERRORS = {
    _error({"base_url": BASE, "api_key_env": "sk-Aa1Bb2Cc3Dd4Ee5Ff6"}),
    _error({"base_url": BASE, "api_key_env": "MY-KEY"}),
}


@given(st.text(max_size=60))
def test_api_key_env_errors_never_depend_on_the_value(value: str) -> None:
    """Whatever was pasted into api_key_env, the message is one of two fixed texts: a key is never echoed."""
    msg = _error({"base_url": BASE, "api_key_env": value})
    assert msg is None or msg in NAME_ERRORS


KEY_SHAPED = st.from_regex(r"(sk-|sk_|hf_|sk-proj-)[A-Za-z0-9]{8,40}", fullmatch=True) | st.from_regex(
    r"[A-Za-z0-9]{16,40}", fullmatch=True
).filter(lambda k: any(c.isdigit() for c in k))


@given(KEY_SHAPED)
def test_key_shaped_values_are_refused_as_variable_names(key: str) -> None:
    msg = _error({"base_url": BASE, "api_key_env": key})
    assert msg is not None and "looks like an API key" in msg and msg in NAME_ERRORS


@given(st.lists(st.from_regex(r"[A-Z]{1,12}", fullmatch=True), min_size=1, max_size=5).map("_".join))
def test_ordinary_variable_names_are_accepted(name: str) -> None:
    assert _error({"base_url": BASE, "api_key_env": name}) is None


@given(st.from_regex(r"[A-Za-z0-9._~-]{1,40}", fullmatch=True))
def test_password_in_base_url_is_refused_and_not_echoed(password: str) -> None:
    msg = _error({"base_url": f"http://user:{password}@127.0.0.1:8000/v1"})
    assert msg is not None and "credentials in the URL" in msg and f":{password}@" not in msg


# --- an endpoint that echoes the key back: into /version, /v1/models, completions, errors ---------------


def test_a_key_the_server_echoes_is_written_nowhere(
    servers: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``/echo`` the server's ``/version`` and ``/v1/models`` answers hold the Authorization header, and
    ``echo-auth`` completions hold it split over two tokens; the manifest keeps those answers, the records
    the completions, and the reports read both."""
    keyed, _ = servers
    monkeypatch.setenv(ENV, KEY)
    path = tmp_path / "echoed.toml"
    path.write_text(f"""
name = "echoed"
[endpoint]
base_url = "{keyed}/echo"
api_key_env = "{ENV}"
[[canaries]]
id = "echoed"
prompt = "echo-auth"
[[canaries]]
id = "echoed-stream"
prompt = "echo-auth"
stream = true
[[canaries]]
id = "refused"
prompt = "status:500"
[sweep]
levels = [0]
canaries_per_level = 2
warmup = 0
baseline = 1
""")
    result = run(RunRequest(path, out_dir=tmp_path / "runs", report=True))
    assert result.status == "finished"

    files = files_under(result.run_dir)
    assert {"manifest.json", "canaries.jsonl", "report.json", "report.html", "report.md"} <= set(files)
    leaks = [name for name, data in files.items() if KEY.encode() in data]
    assert leaks == [], f"the API key was written to {leaks}"
    server = read_manifest(result.run_dir).server
    assert server["version"] == "fault-server; you sent Bearer [redacted]"  # kept, less the key
    assert server["models"]["data"][0]["owned_by"] == "Bearer [redacted]"
    echoed = [json.loads(line) for line in files["canaries.jsonl"].splitlines() if b'"echoed' in line]
    assert echoed and all(r["status"] == "ok" and "[redacted]" in r["text"] for r in echoed)
    assert {r["stream"] for r in echoed} == {True, False}  # the answer's id, whole and streamed, less the key
    assert all(r["answer_id"] == "cmpl-Bearer [redacted]" for r in echoed)


def test_a_probe_error_that_echoes_the_key_and_terminal_escapes_is_printed_safely(
    servers: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``/hostile`` every completion is a 503 whose body holds the key among ESC, an OSC title, BEL
    and NUL; the probe gives up on it and the CLI (in this process) prints the server's text: without the key,
    and with every control character written as an escape."""
    keyed, _ = servers
    monkeypatch.setenv(ENV, KEY)
    out_dir = tmp_path / "runs"
    cli = loadgen("run", str(scenario(tmp_path, f"{keyed}/hostile")), "--out", str(out_dir))
    assert cli.returncode == 2, cli.stderr
    err = cli.stderr
    # after the progress lines ("probing URL ..."), the error is the last line
    assert err.splitlines()[-1].startswith("loadgen run: error: ") and "HTTP 503 to every probe request" in err
    assert KEY not in err and "Bearer [redacted]" in err
    assert not any(c in err for c in ("\x1b", "\x07", "\x00")), err
    assert "\\x1b]0;owned\\x07\\x1b[2J\\x00overloaded" in err  # shown, not obeyed
    assert not out_dir.exists() or not any(out_dir.iterdir())
