"""Topologies against real processes: embedded engines and stand-in vLLM binaries behind the real vllm-router.

A topology serves through its router, records its servers, keeps one log per process and stops whole. A fault in
any one part (a server that exits, one that never gets healthy, a router that refuses its command line) is an
``EngineError`` that names the part and its role and carries its log tail, and leaves no process behind.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import urllib.request
from pathlib import Path

import pytest

from loadgen.core.errors import EngineError
from loadgen.core.scenario import LauncherSpec, Side, TopologySpec
from loadgen.launchers.topology import keep_failed_logs, start_topology
from tests.loadgen.engine.pd_processes import router_available

pytestmark = pytest.mark.skipif(not router_available(), reason="vllm-router is not installed (pip install '.[test]')")

FAKE = Path(__file__).with_name("fake_engine.py")
EMBEDDED = LauncherSpec(args=["--no-enable-prefix-caching"], ready_timeout_s=60)


def _descendants() -> set[int]:
    """Every living process this test process started, from /proc (zombies excluded)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z":
                parent[int(entry.name)] = int(fields[1])
    found, todo = set(), [os.getpid()]
    while todo:
        current = todo.pop()
        kids = {p for p, pp in parent.items() if pp == current}
        found |= kids
        todo.extend(kids)
    return found


def _complete(base: str) -> dict[str, object]:
    body = {"model": "loadgen-tiny", "prompt": "The old man climbed", "max_tokens": 4, "temperature": 0}
    req = urllib.request.Request(
        base + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return dict(json.loads(resp.read()))


def _fake_vllm(tmp_path: Path) -> str:
    exe = tmp_path / "vllm"
    exe.write_text(f'#!/bin/sh\nshift 2\nexec {sys.executable} {FAKE} "$@"\n')  # drops "serve MODEL"
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_an_embedded_pair_serves_through_the_router_and_stops_whole(tmp_path: Path) -> None:
    before = _descendants()
    with start_topology(EMBEDDED, TopologySpec(), "pd", tmp_path / "logs") as topo:
        answer = _complete(topo.url)
        assert answer["usage"]["completion_tokens"] == 4  # type: ignore[index]
        servers = topo.endpoint_servers()
        assert [(s.name, s.role) for s in servers] == [("prefill", "prefill"), ("decode", "decode")]
        urls = {s.url for s in topo.servers}
        assert {s.base_url for s in servers} == urls and topo.url not in urls
        facts = topo.describe()
        assert facts["topology"] == "pd" and [p["name"] for p in facts["servers"]] == ["prefill", "decode", "router"]
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        topo.move_logs(run_dir)
        assert topo.exited() == []
        started = _descendants() - before
    assert sorted(p.name for p in run_dir.iterdir()) == ["engine-decode.log", "engine-prefill.log", "router.log"]
    assert "READY http://" in (run_dir / "engine-prefill.log").read_text()
    assert "--role prefill" in facts["servers"][0]["command"]
    prefill_port = servers[0].base_url.rsplit(":", 1)[1]  # the decoder fetches from its prefiller, and from no other
    assert facts["servers"][1]["command"].endswith(f"--role decode --kv-peers 127.0.0.1:{prefill_port}")
    assert not started & _descendants()  # the guards, the engines and the router: all gone


def test_reload_puts_one_engine_behind_the_router_as_its_own_prefiller(tmp_path: Path) -> None:
    with start_topology(EMBEDDED, TopologySpec(mode="reload"), "reload", tmp_path) as topo:
        assert _complete(topo.url)["choices"]
        (server,) = topo.endpoint_servers()
        assert (server.name, server.role) == ("engine", "both")
        router = topo.describe()["servers"][-1]["command"]
        port = server.base_url.rsplit(":", 1)[1]
        assert f"--prefill {server.base_url} --decode http://localhost:{port}" in router
        assert topo.router is not None
        topo.router.process.kill()  # the guard: the router's group is then ended by stop
        topo.router.process.wait()
        assert topo.exited() == ["the router (vllm-router) exited with code -9 during the run; its log: router.log"]
    assert (tmp_path / "engine.log").exists() and (tmp_path / "router.log").exists()


def test_each_vllm_side_gets_its_own_flags_env_and_side_channel_port(tmp_path: Path) -> None:
    launcher = LauncherSpec(kind="vllm", model="m", executable=_fake_vllm(tmp_path), ready_timeout_s=30)
    topology = TopologySpec(
        prefill=Side(args=["--gpu-memory-utilization", "0.14"], env={"FAKE_RECORD": str(tmp_path / "p.json")}),
        decode=Side(env={"FAKE_RECORD": str(tmp_path / "d.json"), "VLLM_ATTENTION_BACKEND": "FLASH_ATTN"}),
    )
    with start_topology(launcher, topology, "pd", tmp_path / "logs") as topo:
        assert topo.router is not None and topo.exited() == []
        p, d = (json.loads((tmp_path / f"{x}.json").read_text()) for x in "pd")
    assert "--gpu-memory-utilization" in p["argv"] and "--gpu-memory-utilization" not in d["argv"]
    assert "NixlConnector" in p["argv"][p["argv"].index("--kv-transfer-config") + 1]
    assert p["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"] != d["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"]
    assert d["env"]["VLLM_ATTENTION_BACKEND"] == "FLASH_ATTN" and "VLLM_ATTENTION_BACKEND" not in p["env"]


@pytest.mark.parametrize(
    ("part", "words"),
    [
        ("prefill-exits", ["the prefill server (role prefill) did not start", "--max-num-seqs"]),
        ("decode-never-healthy", ["the decode server (role decode) did not start", "within 2 s", "loading for 600"]),
        ("router-refuses", ["the router (vllm-router, in front of prefill http", "exited with code 2", "--bogus"]),
    ],
)
def test_a_fault_names_the_part_and_its_role_and_leaves_nothing_running(
    tmp_path: Path, part: str, words: list[str]
) -> None:
    launcher, topology = EMBEDDED, TopologySpec()
    if part == "prefill-exits":
        topology = TopologySpec(prefill=Side(args=["--max-num-seqs", "0"]))
    elif part == "decode-never-healthy":
        launcher = LauncherSpec(kind="vllm", model="m", executable=_fake_vllm(tmp_path), ready_timeout_s=2)
        topology = TopologySpec(decode=Side(env={"FAKE_LOADING_S": "600"}))
    else:
        topology = TopologySpec.model_validate({"router": {"args": ["--bogus"]}})
    before = _descendants()
    logs = tmp_path / "logs"
    with pytest.raises(EngineError) as err:
        start_topology(launcher, topology, "pd", logs)
    message = str(err.value)
    assert all(w in message for w in words), message
    assert _descendants() <= before  # whatever had started was stopped
    kept = keep_failed_logs(err.value, logs, tmp_path / "cell")
    assert str(logs) not in str(kept) and (tmp_path / "cell" / "engine-failed.txt").read_text() == str(kept) + "\n"
    assert {p.name for p in logs.glob("*.log")} == {p.name for p in (tmp_path / "cell").glob("*.log")}
