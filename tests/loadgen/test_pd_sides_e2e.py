"""End to end through the real CLI: ``loadgen run`` against the real vllm-router in PD mode in front of an embedded
prefill server and an embedded decode server (CPU), with the servers listed in the scenario.

Each run: levels 0, 4, 8, three streamed canaries each, the servers' /metrics scraped every 10 ms. Prefill-side
background (long prompts, one output token) raises the prefill side's measured others and not the decode side's;
decode-side background (short prompts, long outputs) the reverse; every level of both runs has per-side figures
in report.json, report.md, report.html and on the terminal. A router without its servers listed says the x-axis is
unmeasured and names the fix; a server whose /metrics is down is a notice naming it and its role, and the run goes
on; a router that is down is an error naming it and the servers behind it.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.core.manifest import read_manifest
from loadgen.launchers.process import start_embedded
from reports.render.mdtext import text
from tests.loadgen.cli.clikit import loadgen_run
from tests.loadgen.engine.pd_processes import router_available, start_router

pytestmark = pytest.mark.skipif(not router_available(), reason="vllm-router is not installed (the test extra has it)")

CANARY = (
    "The history of the old harbour town begins with a small group of fishermen who built their houses along "
    "the river and traded fish for grain with the farmers of the valley above the town"
)


@dataclass(frozen=True)
class PD:
    router: str
    prefill: str
    decode: str


@pytest.fixture(scope="module")
def pd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PD]:
    logs = tmp_path_factory.mktemp("pd-servers")
    with ExitStack() as stack:
        common = ["--no-enable-prefix-caching"]
        p = stack.enter_context(start_embedded(["--role", "prefill", *common], log_path=logs / "prefill"))
        peer = ["--kv-peers", p.url.removeprefix("http://")]  # the prefill server the decode server may fetch from
        d = stack.enter_context(start_embedded(["--role", "decode", *peer, *common], log_path=logs / "decode"))
        router = stack.enter_context(start_router([p.url], [d.url], logs / "router.log"))
        yield PD(router, p.url, d.url)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scenario(
    tmp_path: Path,
    pd: PD,
    *,
    side: str | None,
    servers: bool = True,
    decode_metrics: str | None = None,
    levels: str = "[0, 4, 8]",
) -> Path:
    listed = ""
    if servers:
        listed = (
            f'[[endpoint.servers]]\nname = "p"\nrole = "prefill"\nbase_url = "{pd.prefill}"\n'
            f'[[endpoint.servers]]\nname = "d"\nrole = "decode"\nbase_url = "{pd.decode}"\n'
        )
        if decode_metrics is not None:
            listed += f'metrics_url = "{decode_metrics}"\n'
    background = {
        "prefill": 'side = "prefill"\nmax_tokens = [1, 1]\n',
        "decode": 'side = "decode"\nmax_tokens = [48, 64]\n',
    }
    text = f"""
name = "pd-{side or "none"}"
[endpoint]
base_url = "{pd.router}"
metrics_interval_s = 0.01
{listed}
[[canaries]]
id = "c"
prompt = "{CANARY}"
max_tokens = 48
stream = true
[background]
{background.get(side or "", "")}
[sweep]
levels = {levels}
canaries_per_level = 3
warmup = 0
baseline = 2
settle_timeout_s = 2
"""
    path = tmp_path / f"pd-{side}.toml"
    path.write_text(text)
    return path


def medians(report: dict[str, Any], side: str) -> dict[int, float | None]:
    return {lv["concurrency"]: lv["co_residency_sides"][side]["median"] for lv in report["levels"]}


@pytest.mark.parametrize("side", ["prefill", "decode"])
def test_background_on_one_side_raises_that_sides_measured_others_only(pd: PD, tmp_path: Path, side: str) -> None:
    proc = loadgen_run(scenario(tmp_path, pd, side=side), tmp_path / "runs")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    run_dir = proc.run_dir
    report = orjson.loads((run_dir / "report.json").read_bytes())
    assert {f.name for f in run_dir.glob("engine_metrics*.jsonl")} == {
        "engine_metrics-p.jsonl",
        "engine_metrics-d.jsonl",
    }
    assert [s["name"] for s in read_manifest(run_dir).servers] == ["p", "d"]
    # every level has both sides; the decode life of every canary holds samples, the prefill window of most
    for lv in report["levels"]:
        sides = lv["co_residency_sides"]
        assert sides["decode"]["unmeasured"] == 0, lv
        assert sides["prefill"]["unmeasured"] <= 1, lv
        assert sides["prefill"]["held"] + sides["prefill"]["not_held"] + sides["prefill"]["unmeasured"] == 3
    loaded, quiet = medians(report, side), medians(report, "decode" if side == "prefill" else "prefill")
    assert loaded[8] is not None and loaded[0] is not None and loaded[8] >= loaded[0] + 1, (loaded, quiet)
    assert quiet[8] is not None and quiet[8] <= 0.5, (loaded, quiet)
    entry = report["canaries"][0]
    assert entry["sides"]["loaded"] == side and entry["sides"][side] is not None
    assert lv["co_residency"] == lv["co_residency_sides"][side]  # the canary's co-residency is the loaded side's
    md = (run_dir / "report.md").read_text()
    html = (run_dir / "report.html").read_text()
    assert "Divergence by prefill-side load" in md and "Divergence by decode-side load" in md
    assert "Prefill and decode sides" in html
    for lv in report["levels"]:
        row = next(line for line in md.splitlines() if line.startswith(f"| {lv['concurrency']} | 3 |"))
        assert " · d " in row and "| p " in row
        assert " · d " in next(
            line for line in proc.stdout.splitlines() if line.startswith(f"| {lv['concurrency']} | 3 |")
        )
    follows = entry["sides"]["follows"]
    assert follows["sentence"] in proc.stdout and follows["sentence"] in md


def test_a_router_without_its_servers_says_the_x_axis_is_unmeasured(pd: PD, tmp_path: Path) -> None:
    proc = loadgen_run(scenario(tmp_path, pd, side=None, servers=False, levels="[0, 2]"), tmp_path / "runs")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = proc.run_dir
    report = orjson.loads((run_dir / "report.json").read_bytes())
    said = report["run"]["x_axis_unmeasured"]
    assert said.startswith("The x-axis is unmeasured: no /metrics sample gave the engine's running requests")
    assert f"{pd.router}/metrics: no Prometheus /metrics (HTTP 405" in said
    assert "does not expose its engines' /metrics" in said and "[[endpoint.servers]]" in said
    assert f"Notice: {said}" in proc.stdout
    assert "The x-axis is unmeasured" in (run_dir / "report.md").read_text()
    assert "sides" not in report["canaries"][0]


def test_a_server_whose_metrics_is_down_is_a_notice_naming_it_and_the_run_goes_on(pd: PD, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{closed_port()}/metrics"
    path = scenario(tmp_path, pd, side="decode", decode_metrics=dead, levels="[0, 2]")
    proc = loadgen_run(path, tmp_path / "runs")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = proc.run_dir
    m = read_manifest(run_dir)
    assert m.status == "finished"
    notice = next(n for n in m.notices if n.startswith("server 'd' (decode): "))
    assert dead in notice and "Connection refused" in notice and "co-residency is unmeasured" in notice
    report = orjson.loads((run_dir / "report.json").read_bytes())
    assert report["run"]["x_axis_unmeasured"].startswith("The decode side's x-axis is unmeasured: server 'd' (decode)")
    assert text(notice) in (run_dir / "report.md").read_text()
    for lv in report["levels"]:
        assert lv["co_residency_sides"]["decode"]["unmeasured"] == lv["canaries"]
        assert lv["co_residency_sides"]["prefill"]["unmeasured"] < lv["canaries"]
    assert not (run_dir / "engine_metrics-d.jsonl").exists() and (run_dir / "engine_metrics-p.jsonl").exists()


def test_a_router_that_is_down_is_an_error_naming_it_and_the_servers_behind_it(pd: PD, tmp_path: Path) -> None:
    gone = PD(f"http://127.0.0.1:{closed_port()}", pd.prefill, pd.decode)
    proc = loadgen_run(scenario(tmp_path, gone, side="decode"), tmp_path / "runs")
    assert proc.returncode == 2
    assert (
        "error: the router at endpoint.base_url, in front of server 'p' (prefill), server 'd' (decode): "
        f"{gone.router}/v1/models: cannot connect"
    ) in proc.stderr
