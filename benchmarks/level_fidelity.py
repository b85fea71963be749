"""Level fidelity: did every canary really share the engine with at least its level of other requests?

Why: a level's determinism figures mean "under N other requests" only if the engine ran N others for
the canary's whole life. This script starts the embedded engine, runs a real headless ``loadgen run``
of the quickstart canary against it, and per level reads two witnesses from the run folder:

- the engine's own truth: each canary's ``engine_batch_sizes`` (the batch size of every step it was
  in); the canary *held* its level when every step ran at least ``level`` other sequences;
- the tool's measurement: ``engine_metrics.jsonl`` (``/metrics`` scraped every 50 ms by the run),
  the running count minus the canary at each sample inside the canary's life, windowed as the
  report does it (``reports.coresidency.join_engine``).

``--compare`` runs the same sweep a second time with the holding switched off (no first-request
jitter, no hand-over: the behaviour before levels were held), side by side. The engine runs with
``--max-num-seqs 96``: its default of 64 sequences a step would cap level 64 (plus the canary) by
itself, which the report would rightly show as not held.

Run: ``python benchmarks/level_fidelity.py [--quick] [--levels 0,1,2,4,8,16,32,64] [--canaries-per-level 8]
[--compare]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from harness import REPO, command_line, table

from collectors.runfolder import load_run
from loadgen.launchers.process import start_embedded
from reports.coresidency import join_engine
from scenarios import path_of

ENGINE_ARGS = ["--max-num-seqs", "96"]


def scenario_file(tmp: Path, *, holding: bool) -> Path:
    """The quickstart scenario, with the level holding on (as shipped) or off (no jitter, no hand-over)."""
    text = path_of("quickstart").read_text()
    if not holding:
        assert "[background]" in text and "spawn_jitter_s" not in tomllib.loads(text)["background"]
        text = text.replace("[background]\n", "[background]\nspawn_jitter_s = 0.0\nhandover_s = 0.0\n")
    path = tmp / ("quickstart.toml" if holding else "quickstart-unheld.toml")
    path.write_text(text)
    return path


def run_sweep(tmp: Path, scenario: Path, url: str, levels: str, per_level: int) -> Path:
    cmd = [sys.executable, "-m", "loadgen", "run", str(scenario), "--host", url, "--levels", levels]
    cmd += ["--canaries-per-level", str(per_level), "--out", str(tmp / "runs"), "--no-report"]
    out = subprocess.run(cmd, check=True, cwd=REPO, capture_output=True)
    return Path(out.stdout.decode().strip().splitlines()[-1])


def read_run(run_dir: Path) -> Any:
    """The canary frame with both witnesses, as the report computes them (``reports.coresidency``)."""
    run = load_run(run_dir)
    interval = (run.manifest.engine_metrics or {}).get("interval_s") or 0.05
    return join_engine(run.canaries.frame, run.engine_t, run.engine_running, edge_s=float(interval)), run


def spread(values: Any) -> str:
    values = [v for v in values if v == v]  # NaN: not measured
    return f"{min(values):g}/{statistics.median(values):g}/{max(values):g}" if values else "—"


def share(held: int, n: int) -> str:
    return f"{held}/{n} ({held / n:.0%})" if n else "—"


def level_rows(frame: Any, levels: list[int]) -> list[Any]:
    rows = []
    for level in levels:
        mine = frame[(frame["phase"] == "sweep") & (frame["level"] == level) & (frame["status"] == "ok")]
        truth = mine["batch_others_min"].dropna()
        scraped = mine["engine_others_min"].dropna()
        rows.append(
            (
                level,
                len(mine),
                int((mine["held_at_send"] == True).sum()),  # noqa: E712 (a nullable column)
                share(int((truth >= level).sum()), len(truth)),
                spread(truth),
                spread(mine["batch_others_median"]),
                share(int((scraped >= level).sum()), len(scraped)),
                spread(scraped),
                int(mine["engine_samples"].sum()),
            )
        )
    return rows


HEADER = [
    "level",
    "canaries",
    "held at send",
    "held (engine truth)",
    "truth others min: min/med/max",
    "truth others median: min/med/max",
    "held (scraped)",
    "scraped others min: min/med/max",
    "samples",
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="3 canaries per level")
    p.add_argument("--levels", default="0,1,2,4,8,16,32,64")
    p.add_argument("--canaries-per-level", type=int, default=8)
    p.add_argument("--compare", action="store_true", help="also run with the holding off, side by side")
    args = p.parse_args()
    if args.quick:
        args.canaries_per_level = 3
    levels = [int(x) for x in args.levels.split(",")]
    print(f"command: {command_line()}")
    variants = [True, False] if args.compare else [True]
    with tempfile.TemporaryDirectory(prefix="bench-fidelity-") as tmp_:
        tmp = Path(tmp_)
        with start_embedded(ENGINE_ARGS, log_path=tmp / "engine.log") as engine:
            for holding in variants:
                run_dir = run_sweep(
                    tmp, scenario_file(tmp, holding=holding), engine.url, args.levels, args.canaries_per_level
                )
                frame, run = read_run(run_dir)
                scrapes = 0 if run.engine_t is None else len(run.engine_t)
                title = "levels held (as shipped)" if holding else "holding off (no jitter, no hand-over)"
                print(f"\n{title}: embedded engine {' '.join(ENGINE_ARGS)}, quickstart canary, {scrapes} scrapes")
                print(table(HEADER, level_rows(frame, levels)))


if __name__ == "__main__":
    main()
