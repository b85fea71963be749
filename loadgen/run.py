"""``loadgen run``: one command from a scenario file to a reported run folder.

Why: a user should not have to start an engine, prepare a folder, drive Locust and call the report
by hand. This module validates and probes in this process (clean errors, before any traffic),
starts the embedded engine when no endpoint is given, runs Locust in a child process (gevent's
patching stays out of this one), then finishes the manifest and writes the reports. Library
first: the CLI only parses arguments and renders errors.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from collectors.manifest import now_iso, read_manifest, update_manifest
from loadgen.launch import RunningEngine, start_embedded
from loadgen.prepare import prepare_run
from loadgen.scenario import load_scenario, with_overrides

LOCUSTFILE = Path(__file__).with_name("locustfile.py")


@dataclass
class RunResult:
    run_dir: Path
    status: str
    locust_exit: int


def locust_command(
    run_dir: Path,
    base_url: str,
    scenario_path: str,
    *,
    ui: bool,
    web_port: int,
    web_host: str = "127.0.0.1",
    stop_timeout_s: float = 30.0,
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--host",
        base_url,
        "--run-dir",
        str(run_dir),
        "--scenario",
        scenario_path,
        "--out-dir",
        str(run_dir.parent),
        "--stop-timeout",
        f"{stop_timeout_s:g}",
        "--exit-code-on-error",
        "0",
        "--csv",
        str(run_dir / "locust"),
        "--html",
        str(run_dir / "locust.html"),
    ]
    if ui:
        cmd += ["--web-host", web_host, "--web-port", str(web_port)]
    else:
        cmd += ["--headless", "--only-summary", "--loglevel", "WARNING"]
    return cmd


def _wait_forwarding_signals(proc: subprocess.Popen[bytes]) -> int:
    """Wait for Locust; on SIGTERM or Ctrl-C let it stop gracefully so the manifest and records are finished."""

    def forward(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:
                proc.send_signal(signal.SIGINT)  # harmless if the terminal already sent it to the group
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(
    scenario_path: Path,
    *,
    host: str | None = None,
    out_dir: Path = Path("runs"),
    levels: list[int] | None = None,
    canaries_per_level: int | None = None,
    labels: dict[str, str] | None = None,
    engine_args: list[str] | None = None,
    ui: bool = False,
    web_port: int = 8089,
    report: bool = True,
) -> RunResult:
    source = str(scenario_path)
    scenario = with_overrides(
        load_scenario(scenario_path), base_url=host, levels=levels, canaries_per_level=canaries_per_level, labels=labels
    )
    engine: RunningEngine | None = None
    tmp = Path(tempfile.mkdtemp(prefix="loadgen-engine-"))
    try:
        extra = {}
        if scenario.endpoint.base_url is None:
            engine = start_embedded(engine_args or [], log_path=tmp / "engine.log")
            scenario = with_overrides(
                scenario,
                base_url=engine.url,
                labels={"engine": "embedded", **{k: v for k, v in (labels or {}).items()}},
            )
            extra["engine"] = {"kind": "embedded", "command": engine.command[1:], "url": engine.url}
        run_dir = prepare_run(scenario, source=source, out_dir=out_dir, extra=extra)
        assert scenario.endpoint.base_url is not None
        cmd = locust_command(run_dir, scenario.endpoint.base_url, source, ui=ui, web_port=web_port)
        with open(run_dir / "locust.log", "ab") as log:
            proc = subprocess.Popen(cmd, stdout=None if ui else log, stderr=subprocess.STDOUT if not ui else None)
            code = _wait_forwarding_signals(proc)
    finally:
        if engine is not None:
            engine.stop()
            if "run_dir" in locals():
                shutil.copy(engine.log_path, run_dir / "engine.log")
        shutil.rmtree(tmp, ignore_errors=True)
    status = str(read_manifest(run_dir).get("status"))
    if status in ("prepared", "running"):
        status = "interrupted"
        update_manifest(run_dir, status=status, finished=now_iso())
    if report:
        from reports import write_reports

        write_reports(run_dir)
    return RunResult(run_dir, status, code)
