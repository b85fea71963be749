"""``loadgen run --ui`` refuses what another web page, or a changed form, could make it do.

Real UIs (``loadgen run --ui`` as a subprocess) against ``fault_server.py``: one server that wants the
API key (the launch host) and one that only watches (the host a form would point the run at). A run
that started would probe its host at once and leave a run folder; so a refused start must leave the
watcher with no request at all and no folder anywhere, and the start allowed afterwards shows the UI
itself still works.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from loadgen.core.manifest import read_manifest
from loadgen.studies.ui_session import LOG_NAME
from tests.loadgen.serve_app import script_server, seen
from tests.loadgen.stop_process import stop

FAULT_SERVER = Path(__file__).parents[1] / "fault_server.py"
KEY = f"lgtest-{uuid.uuid4().hex}"
ENV = "LOADGEN_TEST_UI_KEY"
PASSWORD = f"pw-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    """The host the UI is started with: it wants the key."""
    with script_server(FAULT_SERVER, "--require-key", KEY) as url:
        yield url


@pytest.fixture
def watcher() -> Iterator[str]:
    """Another host, fresh per test: anything a form could send elsewhere would arrive here."""
    with script_server(FAULT_SERVER) as url:
        yield url


def scenario(tmp_path: Path, *, keyed: bool = True, name: str = "guarded", base_url: str | None = None) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(
        f'name = "{name}"\n[endpoint]\n'
        + (f'api_key_env = "{ENV}"\n' if keyed else "")
        + (f'base_url = "{base_url}"\n' if base_url else "")
        + '[[canaries]]\nid = "plain"\nprompt = "ok"\n'
        + "[sweep]\nlevels = [0]\ncanaries_per_level = 1\nwarmup = 0\nbaseline = 1\n"
    )
    return path


@contextmanager
def ui(
    tmp_path: Path,
    port: int,
    wait_http: Callable[[str], None],
    scenario_path: Path,
    host: str,
    *extra: str,
    env: dict[str, str] | None = None,
) -> Iterator[str]:
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "loadgen", "run", str(scenario_path), "--ui", "--host", host]
    cmd += ["--web-port", str(port), "--out", str(out), *extra]
    log_path = tmp_path / f"ui-{port}.log"
    with open(log_path, "wb") as log:  # a file, not a pipe: Locust logs a lot
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, ENV: KEY, **(env or {})})
    try:
        wait_http(f"http://127.0.0.1:{port}/login")  # answers with or without --web-login, before any login
        yield f"http://127.0.0.1:{port}"
    finally:
        code = stop(proc, log_path, out / LOG_NAME)
    assert code == 0, log_path.read_text()[-2000:]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_: Any, **__: Any) -> None:
        return None


def call(
    url: str,
    form: dict[str, str] | None = None,
    *,
    headers: dict[str, str] | None = None,
    cookies: http.cookiejar.CookieJar | None = None,
) -> tuple[int, str, str]:
    """One request, redirects not followed: (status, body, Location)."""
    opener = urllib.request.build_opener(_NoRedirect, urllib.request.HTTPCookieProcessor(cookies))
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    req = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data is not None else "GET")
    try:
        with opener.open(req, timeout=10) as resp:
            return resp.status, resp.read().decode(), resp.headers.get("Location", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), exc.headers.get("Location", "")


def launch_form(tmp_path: Path, host: str, scenario_path: Path, /, **changes: str) -> dict[str, str]:
    """What the UI's own Start button sends (fields as Locust's form names them), with ``changes``."""
    form = {
        "user_count": "0",
        "spawn_rate": "0",
        "host": host,
        "run_time": "",
        "profile": "",
        "canaries_per_level": "1",
        "labels": "",
        "levels": "0",
        "out_dir": str(tmp_path / "runs"),
        "scenario": str(scenario_path),
    }
    return {**form, **changes}


def wait_report(out: Path, count: int = 1) -> list[Path]:
    deadline = time.monotonic() + 60
    while len(found := sorted(p.parent for p in out.glob("*/report.json"))) < count:
        assert time.monotonic() < deadline, f"no report in {out}"
        time.sleep(0.2)
    return found


def folders(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir()) if path.exists() else []


def test_start_from_another_page_is_refused(
    target: str, watcher: str, tmp_path: Path, free_port: int, wait_http: Callable[[str], None]
) -> None:
    """(a) A page elsewhere (its Origin, else its Referer; a sandboxed frame's ``null``; a DNS-rebound name)
    may not start, stop or reset; the same form from the UI's own page still starts a run."""
    path = scenario(tmp_path)
    before = seen(target)["requests"]
    with ui(tmp_path, free_port, wait_http, path, target) as base:
        form = launch_form(tmp_path, target, path)
        foreign = [
            {"Origin": "http://evil.example"},
            {"Origin": "null"},
            {"Referer": "http://evil.example/page.html"},
            {"Origin": f"http://evil.example:{free_port}", "Host": f"evil.example:{free_port}"},
            {"Origin": "http://localhost:1", "Referer": f"{base}/"},  # Origin decides, not a forged Referer
        ]
        for headers in foreign:
            status, body, _ = call(base + "/swarm", form, headers=headers)
            assert status == 403, (headers, status, body)
            assert json.loads(body)["success"] is False and "refused" in json.loads(body)["message"]
        for route in ("/stop", "/stats/reset"):
            assert call(base + route, {}, headers={"Origin": "http://evil.example"})[0] == 403
        # Locust answers every origin (CORS *): a foreign page may not read the UI either
        assert call(base + "/stats/requests", headers={"Origin": "http://evil.example"})[0] == 403
        assert json.loads(call(base + "/stats/requests")[1])["state"] == "ready"
        assert folders(tmp_path / "runs") == []

        status, body, _ = call(base + "/swarm", form | {"labels": "from=own"}, headers={"Origin": base})
        assert status == 200 and json.loads(body)["success"] is True, body
        (run_dir,) = wait_report(tmp_path / "runs")
    assert read_manifest(run_dir).labels == {"from": "own"}  # the one run folder is the allowed start's
    assert folders(tmp_path / "runs") == [run_dir]
    after = seen(target)["requests"]
    assert sum(after.values()) > sum(before.values())
    assert seen(watcher)["requests"] == {}


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"host": "WATCHER"}, id="host"),
        pytest.param({"out_dir": "ELSEWHERE"}, id="out_dir"),
        pytest.param({"host": "WATCHER", "out_dir": "ELSEWHERE"}, id="host+out_dir"),
        pytest.param({"scenario": "OTHER_SCENARIO"}, id="scenario"),
        pytest.param({"run_dir": "ELSEWHERE"}, id="run_dir"),
        pytest.param({"html_file": "ELSEWHERE_HTML"}, id="other-option"),
    ],
)
def test_form_cannot_move_the_run(
    changes: dict[str, str],
    target: str,
    watcher: str,
    tmp_path: Path,
    free_port: int,
    wait_http: Callable[[str], None],
) -> None:
    """(b) A start whose form points elsewhere (another host, folder or scenario; or sets any other Locust
    option) is refused, even from the UI's own page: the other host sees nothing, no folder appears; a
    start that only changes levels, canaries per level and labels goes ahead, against the launch host."""
    path = scenario(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    other = scenario(tmp_path, name="other", base_url=watcher)  # its own base_url is the watcher
    values = {"WATCHER": watcher, "ELSEWHERE": str(elsewhere), "OTHER_SCENARIO": str(other)}
    values["ELSEWHERE_HTML"] = str(elsewhere / "x.html")
    with ui(tmp_path, free_port, wait_http, path, target) as base:
        form = launch_form(tmp_path, target, path, **{k: values[v] for k, v in changes.items()})
        status, body, _ = call(base + "/swarm", form, headers={"Origin": base})
        answer = json.loads(body)  # refused as Locust refuses a bad form value, so its page shows why
        assert status == 200 and answer["success"] is False, body
        assert "--ui-allow-changes" in answer["message"] or "may not set" in answer["message"]
        status, body, _ = call(base + "/swarm", launch_form(tmp_path, target, path, levels="0, 1", labels="k=v"))
        assert status == 200, body
        (run_dir,) = wait_report(tmp_path / "runs")
    manifest = read_manifest(run_dir)
    assert manifest.endpoint.base_url == target and manifest.levels == [0, 1] and manifest.labels == {"k": "v"}
    assert manifest.status == "finished"
    assert seen(watcher)["requests"] == {}
    assert not elsewhere.exists()


def test_allow_changes_moves_the_run_but_never_the_key(
    target: str, watcher: str, tmp_path: Path, free_port: int, wait_http: Callable[[str], None]
) -> None:
    """With ``--ui-allow-changes`` a start may go to another host and folder, but a scenario that names an
    API key is refused there: the key goes only to the launch host."""
    path = scenario(tmp_path)
    keyless = scenario(tmp_path, keyed=False, name="keyless")
    elsewhere = tmp_path / "elsewhere"
    with ui(tmp_path, free_port, wait_http, path, target, "--ui-allow-changes") as base:
        moved = launch_form(tmp_path, target, path, host=watcher, out_dir=str(elsewhere))
        status, body, _ = call(base + "/swarm", moved)
        answer = json.loads(body)
        assert answer["success"] is False and f"API key ({ENV})" in answer["message"], body
        assert seen(watcher)["requests"] == {}
        status, body, _ = call(base + "/swarm", moved | {"scenario": str(keyless)})
        assert status == 200, body
        (run_dir,) = wait_report(elsewhere)
    assert read_manifest(run_dir).endpoint.base_url == watcher
    got = seen(watcher)
    assert got["requests"] and set(got["authorization"]) == {""}  # reached, and never with the key
    launch = tmp_path / "runs"  # the launch folder holds the session's log, and no run folder
    assert not launch.exists() or [p.name for p in launch.iterdir()] == ["locust-ui.log"]


def test_web_login_refuses_until_logged_in(
    target: str, tmp_path: Path, free_port: int, wait_http: Callable[[str], None]
) -> None:
    """(d) ``--web-login``: without a session the UI, a start and the report redirect to the login page; a
    wrong password gets no session; the right one (from the environment) does, and a start then works."""
    path = scenario(tmp_path)
    login = {"LOADGEN_WEB_PASSWORD": PASSWORD}
    with ui(tmp_path, free_port, wait_http, path, target, "--web-login", env=login) as base:
        form = launch_form(tmp_path, target, path)
        for url, data in [(base + "/", None), (base + "/swarm", form), (base + "/loadgen/report", None)]:
            status, _, location = call(url, data)
            assert status == 302 and "/login" in location, (url, status)
        jar = http.cookiejar.CookieJar()
        bad = {"username": "loadgen", "password": "wrong"}
        assert "/login" in call(base + "/loadgen/login", bad, headers={"Origin": base}, cookies=jar)[2]
        assert call(base + "/swarm", form, cookies=jar)[0] == 302
        assert folders(tmp_path / "runs") == []
        good = {"username": "loadgen", "password": PASSWORD}
        # logging in is a state change too: not from another page
        assert call(base + "/loadgen/login", good, headers={"Origin": "http://evil.example"}, cookies=jar)[0] == 403
        status, _, location = call(base + "/loadgen/login", good, headers={"Origin": base}, cookies=jar)
        assert status == 302 and "/login" not in location
        status, body, _ = call(base + "/swarm", form, cookies=jar)
        assert status == 200 and json.loads(body)["success"] is True, body
        wait_report(tmp_path / "runs")


def test_web_login_needs_a_password() -> None:
    env = {k: v for k, v in os.environ.items() if k != "LOADGEN_WEB_PASSWORD"}
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen", "run", "--ui", "--web-login", "--host", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2 and "LOADGEN_WEB_PASSWORD" in proc.stderr, proc.stderr


def test_form_may_echo_the_launch_values_spelled_its_own_way(tmp_path: Path) -> None:
    """The form sends every field back; only a real change is refused (pure, no Locust)."""
    from types import SimpleNamespace

    from loadgen.load.options import Launch
    from scenarios import path_of

    launched = SimpleNamespace(
        host="http://127.0.0.1:8000",
        scenario=str(path_of("quickstart")),
        out_dir="runs",
        run_dir="",
        html_file=None,
        ui_allow_changes=False,
    )
    launch = Launch.of(launched)
    same = {"host": "http://127.0.0.1:8000/", "scenario": "quickstart", "out_dir": str(Path("runs").resolve())}
    assert launch.refusal(same | {"levels": "0,4", "labels": "a=b", "canaries_per_level": "3"}) is None
    assert "host" in (launch.refusal(same | {"host": "http://127.0.0.1:8001"}) or "")
    assert "scenario" in (launch.refusal(same | {"scenario": "sweep"}) or "")
    assert "out-dir" in (launch.refusal(same | {"out_dir": str(tmp_path)}) or "")
    assert "run-dir" in (launch.refusal(same | {"run_dir": str(tmp_path)}) or "")
    assert "may not set html_file" in (launch.refusal(same | {"html_file": "x.html"}) or "")
    assert "may not set ui_allow_changes" in (launch.refusal({"ui_allow_changes": "true"}) or "")
    launched.host = "http://127.0.0.1:9"  # Locust's /swarm rewrites the parsed options in place: the copy stays
    assert launch.refusal(same) is None
    opened = Launch.of(SimpleNamespace(**{**vars(launched), "ui_allow_changes": True}))
    assert opened.refusal({"host": "http://other:1", "out_dir": str(tmp_path)}) is None
    assert opened.refusal({"html_file": "x.html"}) is not None  # other options stay closed


def test_ui_cannot_be_framed_nor_change_its_users(
    target: str, watcher: str, tmp_path: Path, free_port: int, wait_http: Callable[[str], None]
) -> None:
    """Every answer (a page, a refusal, a redirect to the login) forbids framing by another page; ``/user``
    (Locust's change of user classes and counts) is refused like any change to the launch policy."""
    path = scenario(tmp_path)
    with ui(tmp_path, free_port, wait_http, path, target) as base:
        opener = urllib.request.build_opener(_NoRedirect)
        answers = [opener.open(base + "/", timeout=10), opener.open(base + "/stats/requests", timeout=10)]
        try:
            opener.open(urllib.request.Request(base + "/", headers={"Origin": "http://evil.example"}), timeout=10)
        except urllib.error.HTTPError as exc:
            assert exc.code == 403
            answers.append(exc)
        assert len(answers) == 3
        for answer in answers:
            assert answer.headers["X-Frame-Options"] == "DENY", dict(answer.headers)
            assert answer.headers["Content-Security-Policy"] == "frame-ancestors 'none'", dict(answer.headers)
        users = json.dumps({"user_class_name": "CanaryUser", "host": watcher, "fixed_count": 50}).encode()
        for headers in ({"Origin": base}, {}):
            req = urllib.request.Request(base + "/user", data=users, headers=headers, method="POST")
            try:
                status = opener.open(req, timeout=10).status
            except urllib.error.HTTPError as exc:
                status = exc.code
                assert "fixed when the web UI was started" in json.loads(exc.read())["message"]
            assert status == 403, headers
    assert seen(watcher)["requests"] == {}


def test_ui_on_every_interface_needs_a_login_and_says_so(
    target: str, tmp_path: Path, free_port: int, wait_http: Callable[[str], None]
) -> None:
    """``--web-host 0.0.0.0`` answers any host name (no loopback check): refused without ``--web-login``;
    with it, the start says the host check is off, and a foreign host name still meets the login page."""
    path = scenario(tmp_path)
    cmd = [sys.executable, "-m", "loadgen", "run", str(path), "--ui", "--host", target, "--web-host", "0.0.0.0"]
    cmd += ["--web-port", str(free_port)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and "--web-login" in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()
    login = {"LOADGEN_WEB_PASSWORD": PASSWORD}
    extra = ("--web-host", "0.0.0.0", "--web-login")
    with ui(tmp_path, free_port, wait_http, path, target, *extra, env=login) as base:
        status, _, location = call(base + "/", headers={"Host": f"rebound.example:{free_port}"})
        assert status == 302 and "/login" in location
    log = (tmp_path / f"ui-{free_port}.log").read_text()
    assert "0.0.0.0" in log and "any host name" in log, log[-2000:]
