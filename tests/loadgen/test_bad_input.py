"""Bad input, end to end: every broken scenario in ``bad_scenarios/`` fails cleanly before any load.

Each corpus file opens with comment headers that say what must happen:

- ``# expect: field <path>: <text>``: a ScenarioError naming the file, ``field <path>:`` and ``<text>``;
- ``# expect: file: <text>``: a ScenarioError naming the file and ``<text>`` (unreadable, not TOML, ...);
- ``# expect: url <url>: <text>``: an EndpointError naming ``<url>`` and ``<text>``;
- ``# secret: <text>`` (any number): ``<text>`` must not appear in the message;
- ``# make: directory`` / ``# make: broken-symlink``: the path is made that instead of a copy (tests run
  as root, so chmod 000 would not make a file unreadable);
- ``# unset-env: NAME``: the variable is removed from the environment for the case.

Placeholders in a file are replaced in a temporary copy: ``{FAULT_SERVER}`` (the local OpenAI-style
server), ``{FAULT_HOSTPORT}``, ``{FAULT_PORT}``, ``{CLOSED_SERVER}`` (a closed local port),
``{SILENT_SERVER}`` (accepts connections, never answers), ``{NOT_HTTP_SERVER}`` (answers in another
protocol). Every case goes through ``loadgen.studies.run.run`` and must create no run folder and send no
request beyond the probe's. Bad command-line options (``--out``, ``--levels``, ``--processes``) go through
the CLI's entry point and must be refused, exit 2, before even the probe.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from loadgen.core.errors import EndpointError, LoadgenError, ScenarioError
from loadgen.core.request import RunRequest
from loadgen.runs.probe import PROBE_PROMPT
from loadgen.studies.run import run
from tests.loadgen.cli.clikit import loadgen

CORPUS = Path(__file__).with_name("bad_scenarios")
FILES = sorted(CORPUS.glob("*.toml"))


@dataclass
class Case:
    kind: str  # "field", "file" or "url"
    where: str  # the field path or the URL ("" for "file")
    text: str
    secrets: list[str] = field(default_factory=list)
    make: str | None = None
    unset_env: list[str] = field(default_factory=list)


def parse_headers(raw: bytes) -> Case:
    """Read the leading ``# key: value`` comment lines of a corpus file."""
    case: Case | None = None
    extras: dict[str, list[str]] = {"secret": [], "make": [], "unset-env": []}
    for line in raw.decode("utf-8", "replace").splitlines():
        if not line.startswith("# "):
            break
        key, _, value = line[2:].partition(": ")
        if key == "expect":
            target, _, text = value.partition(": ")
            kind, _, where = target.partition(" ")
            case = Case(kind, where, text)
        elif key in extras:
            extras[key].append(value)
    assert case is not None and case.kind in ("field", "file", "url") and case.text, "no valid '# expect:' header"
    case.secrets, case.unset_env = extras["secret"], extras["unset-env"]
    case.make = extras["make"][0] if extras["make"] else None
    return case


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve_garbage(listener: socket.socket) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")


@pytest.fixture(scope="module")
def placeholders(fault_server: str) -> Iterator[dict[str, str]]:
    silent = socket.create_server(("127.0.0.1", 0), backlog=64)  # never accepts: connects, then silence
    garbage = socket.create_server(("127.0.0.1", 0))
    thread = threading.Thread(target=_serve_garbage, args=(garbage,), daemon=True)
    thread.start()
    hostport = fault_server.removeprefix("http://")
    yield {
        "{FAULT_SERVER}": fault_server,
        "{FAULT_HOSTPORT}": hostport,
        "{FAULT_PORT}": hostport.rsplit(":", 1)[1],
        "{CLOSED_SERVER}": f"http://127.0.0.1:{_closed_port()}",
        "{SILENT_SERVER}": f"http://127.0.0.1:{silent.getsockname()[1]}",
        "{NOT_HTTP_SERVER}": f"http://127.0.0.1:{garbage.getsockname()[1]}",
    }
    silent.close()
    garbage.shutdown(socket.SHUT_RDWR)
    garbage.close()
    thread.join(5)


def seen(fault_server: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{fault_server}/_seen", timeout=5) as resp:
        data: dict[str, Any] = json.loads(resp.read())
    return data


def substitute(raw: bytes, placeholders: dict[str, str]) -> bytes:
    for key, value in placeholders.items():
        raw = raw.replace(key.encode(), value.encode())
    return raw


def materialise(case: Case, raw: bytes, path: Path) -> None:
    if case.make == "directory":
        path.mkdir()
    elif case.make == "broken-symlink":
        path.symlink_to(path.with_name("no-such-target.toml"))
    else:
        assert case.make is None, f"unknown '# make: {case.make}'"
        path.write_bytes(raw)


def test_corpus_covers_enough_cases() -> None:
    assert len(FILES) >= 30
    kinds = {parse_headers(f.read_bytes()).kind for f in FILES}
    assert kinds == {"field", "file", "url"}


@pytest.mark.parametrize("source", FILES, ids=[f.stem for f in FILES])
def test_bad_scenario_fails_before_any_load(
    source: Path, tmp_path: Path, fault_server: str, placeholders: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = substitute(source.read_bytes(), placeholders)
    case = parse_headers(raw)
    for name in case.unset_env:
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / source.name
    materialise(case, raw, path)
    out_dir = tmp_path / "runs"
    before = seen(fault_server)

    t0 = time.monotonic()
    with pytest.raises(LoadgenError) as info:
        run(RunRequest(path, out_dir=out_dir, report=False))
    elapsed_s = time.monotonic() - t0

    msg = str(info.value)
    if case.kind == "url":
        assert isinstance(info.value, EndpointError), msg
        assert case.where in msg, msg
    else:
        assert isinstance(info.value, ScenarioError), msg
        assert str(path) in msg, msg
        if case.kind == "field":
            assert f"field {case.where}:" in msg, msg
    assert case.text in msg, msg
    for secret in case.secrets:
        assert secret not in msg
    assert elapsed_s < 5, f"took {elapsed_s:.1f} s to fail"
    assert not out_dir.exists() or not any(out_dir.iterdir()), "a run folder was created"

    after = seen(fault_server)
    if case.kind != "url":
        assert after["requests"] == before["requests"], "a request reached the server"
    not_probe = {p: n for p, n in after["prompts"].items() if p != PROBE_PROMPT}
    assert not_probe == {p: n for p, n in before["prompts"].items() if p != PROBE_PROMPT}, "load was sent"


# --- bad options: refused by the real CLI before the probe, naming the option ------------------------------

GOOD = """
name = "good"
[endpoint]
base_url = "{url}"
[[canaries]]
prompt = "ok"
[sweep]
levels = [0]
canaries_per_level = 1
"""


def _a_file(tmp_path: Path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("not a folder")
    return path


BAD_OPTIONS: dict[str, tuple[Callable[[Path], list[str]], str, str]] = {
    "out_is_a_file": (lambda t: ["--out", str(_a_file(t))], "--out", "is a file, not a folder"),
    "out_below_a_file": (lambda t: ["--out", str(_a_file(t) / "runs")], "--out", "cannot be made"),
    "out_where_nothing_can_be_made": (lambda t: ["--out", "/proc/loadgen-runs"], "--out", "cannot create run folders"),
    "level_of_a_billion": (lambda t: ["--levels", "0,1000000000"], "--levels", "expected at most 10000"),
    "too_many_levels": (lambda t: ["--levels", ",".join(map(str, range(101)))], "--levels", "at most 100 levels"),
    "a_million_processes": (lambda t: ["--processes", "1000000"], "--processes 1000000", "expected -1"),
    "processes_not_a_number": (lambda t: ["--processes", "many"], "--processes", "expected an integer or 'auto'"),
}


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_bad_option_fails_before_any_traffic(case: str, tmp_path: Path, fault_server: str) -> None:
    args, option, text = BAD_OPTIONS[case]
    scenario = tmp_path / "good.toml"
    scenario.write_text(GOOD.format(url=fault_server))
    extra = args(tmp_path)
    if "--out" not in extra:
        extra += ["--out", str(tmp_path / "runs")]
    before = seen(fault_server)
    out = loadgen("run", str(scenario), *extra)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("loadgen run: error: ") and option in out.stderr and text in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert seen(fault_server)["requests"] == before["requests"], "a request reached the server"
    assert not (tmp_path / "runs").exists()
