"""Level fidelity: did every canary share the endpoint with its level of other requests, whatever the endpoint?

Why: a level's determinism figures mean "under N other requests" only if the endpoint ran about N others for the
canary's life (docs/design.md, "The level's band"). How the background can keep a slot busy depends on what the
endpoint lets the client see of a request's progress, so the default part drives one endpoint of each timing class
(``tests/loadgen/timing_server.py``, run as a script, the endpoint the band tests drive): answers in one piece
after a fixed delay whatever their length (a buffering proxy), the same with a random delay, token-by-token streams,
and non-streamed answers after a fixed delay. Per class a real headless ``loadgen run`` at levels 1, 3, 12 and 48,
and per level, from the server's own log (each request's seconds beside each count of other requests, from its
arrival to its last byte written) side by side:

- ``in band``: the share of all the level's canary life the server spent within the level's band
  ``[L - floor(L / 4), L + ceil(L / 4)]`` (``loadgen.core.band.time_in_band``), and below it and above it;
- the server's own count of other requests: the canaries' time-weighted medians (min/median/max over the
  canaries) and the most it ever reached beside one;
- the canaries ``report.json`` counted ``not_at_level`` (its own witness: with no ``/metrics``, the client's own
  requests in flight) and the records' ``level_bound``.

``--baseline REV`` runs an earlier revision's tool too (a temporary git worktree), each class against a fresh
server, side by side: the before/after of a change to the holding. ``--engine`` adds the older part: the embedded
engine and the quickstart canary, with the engine's own truth (each canary's ``engine_batch_sizes``: held when
every step ran at least ``level`` other sequences) beside the scraped ``/metrics`` gauge (windowed as the report
does it, ``reports.analysis.coresidency.join_engine``); ``--compare`` runs that sweep again with the holding
switched off (no first-request jitter, no hand-over). The engine runs with ``--max-num-seqs 96``: its default of 64
sequences a step would cap level 64 (plus the canary) by itself.

Run: ``python benchmarks/level_fidelity.py [--quick] [--canaries-per-level 8] [--classes whole-fixed,...]
[--baseline REV] [--engine [--levels 0,1,2,4,8,16,32,64] [--compare]]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import tomllib
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from harness import REPO, checkout, command_line, table, tool_env

from collectors.jsonl import read_jsonl
from collectors.read.runfolder import load_run
from loadgen.core.band import level_band, time_in_band
from loadgen.launchers.process import start_embedded
from reports.analysis.coresidency import join_engine
from scenarios import path_of

sys.path.insert(0, str(REPO))  # run as a script: the timing classes the band tests hold, and their server
from tests.loadgen.serve_app import script_server
from tests.loadgen.timing_classes import CLASSES, PROMPT, Timing, scenario_text
from tests.loadgen.timing_classes import SERVER as TIMING_SERVER

ENGINE_ARGS = ["--max-num-seqs", "96"]
TIMING_LEVELS = [1, 3, 12, 48]


def timing_scenario(tmp: Path, timing: Timing, per_level: int) -> Path:
    path = tmp / f"band-{timing.name}.toml"
    path.write_text(scenario_text(timing, TIMING_LEVELS, per_level, baseline=2))
    return path


@dataclass(frozen=True)
class Life:
    """One sweep canary as the server saw it, beside its record."""

    level: int
    seconds: dict[int, float]  # its life's seconds beside each count of other requests
    median: int
    most: int
    bound: str | None  # the record's level_bound


def timing_run(tmp: Path, timing: Timing, per_level: int, tree: Path | None) -> tuple[list[Life], dict[int, Any]]:
    """One ``loadgen run`` against a fresh server of ``timing``: each sweep canary's life at the server, and
    report.json's ``co_residency.not_at_level`` per level (None where the report has no such figure)."""
    scenario = timing_scenario(tmp, timing, per_level)
    with script_server(TIMING_SERVER, *timing.server_args) as url:
        cmd = [sys.executable, "-m", "loadgen", "run", str(scenario), "--host", url, "--out", str(tmp / "runs")]
        # the tree's own folder as the working directory: ``python -m`` puts it first on the path, before PYTHONPATH
        out = subprocess.run(cmd, cwd=tree or REPO, capture_output=True, env=tool_env(tree), check=False)
        with urllib.request.urlopen(f"{url}/_log") as resp:
            log = [e for e in orjson.loads(resp.read()) if e["tag"].startswith(PROMPT)]
    run_dir = Path(out.stdout.decode().strip().splitlines()[-1])
    records = sorted(read_jsonl(run_dir / "canaries.jsonl").rows, key=lambda r: r["sent_at"])
    if len(records) != len(log):
        raise RuntimeError(f"{run_dir}: {len(records)} canary records, {len(log)} canaries at the server")
    lives = [
        Life(
            r["level"],
            {int(k): v for k, v in e["others_seconds"].items()},
            e["others_median"],
            e["others_max"],
            r.get("level_bound"),
        )
        for r, e in zip(records, log, strict=True)
        if r["phase"] == "sweep"
    ]
    report = orjson.loads((run_dir / "report.json").read_bytes())
    flagged = {lv["concurrency"]: lv.get("co_residency", {}).get("not_at_level") for lv in report.get("levels", [])}
    return lives, flagged


def timing_rows(label: str, lives: list[Life], flagged: dict[int, Any]) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for level in TIMING_LEVELS:
        mine = [life for life in lives if life.level == level]
        total: dict[int, float] = {}
        for life in mine:
            for k, v in life.seconds.items():
                total[k] = total.get(k, 0.0) + v
        share = time_in_band(total, level)
        medians = [life.median for life in mine]
        bounds = sorted({str(life.bound) for life in mine})
        low, high = level_band(level)
        rows.append(
            (
                label,
                level,
                f"[{low}, {high}]",
                len(mine),
                "—" if share is None else f"{share.within:.1%}",
                "—" if share is None else f"{share.below:.1%}",
                "—" if share is None else f"{share.above:.1%}",
                f"{min(medians)}/{statistics.median(medians):g}/{max(medians)}" if medians else "—",
                max((life.most for life in mine), default="—"),
                "—" if flagged.get(level) is None else flagged[level],
                ",".join(bounds),
            )
        )
    return rows


TIMING_HEADER = [
    "class",
    "level",
    "band",
    "canaries",
    "life in band",
    "below",
    "above",
    "server median: min/med/max",
    "server max",
    "report not at level",
    "level_bound",
]


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
    """The canary frame with both witnesses, as the report computes them (``reports.analysis.coresidency``)."""
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


def timing_part(tmp: Path, classes: list[Timing], per_level: int, baseline: str | None) -> None:
    """Each timing class at levels 1, 3, 12, 48: today's tool, and ``baseline``'s beside it where given."""
    with ExitStack() as stack:
        trees: list[tuple[str, Path | None]] = [("today", None)]
        if baseline:
            trees.append((baseline, stack.enter_context(checkout(baseline))))
        for timing in classes:
            rows: list[tuple[object, ...]] = []
            for label, tree in trees:
                folder = tmp / f"{timing.name}-{label}"
                folder.mkdir()
                lives, flagged = timing_run(folder, timing, per_level, tree)
                rows += timing_rows(f"{timing.name} ({label})" if baseline else timing.name, lives, flagged)
            print(f"\n{timing.name}: {' '.join(timing.server_args)}, {per_level} canaries a level, server's own count")
            print(table(TIMING_HEADER, rows))


def engine_part(tmp: Path, levels_arg: str, per_level: int, compare: bool) -> None:
    """The embedded engine and the quickstart canary: the engine's truth beside the scraped gauge."""
    levels = [int(x) for x in levels_arg.split(",")]
    variants = [True, False] if compare else [True]
    with start_embedded(ENGINE_ARGS, log_path=tmp / "engine.log") as engine:
        for holding in variants:
            run_dir = run_sweep(tmp, scenario_file(tmp, holding=holding), engine.url, levels_arg, per_level)
            frame, run = read_run(run_dir)
            scrapes = 0 if run.engine_t is None else len(run.engine_t)
            title = "levels held (as shipped)" if holding else "holding off (no jitter, no hand-over)"
            print(f"\n{title}: embedded engine {' '.join(ENGINE_ARGS)}, quickstart canary, {scrapes} scrapes")
            print(table(HEADER, level_rows(frame, levels)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="3 canaries per level")
    p.add_argument("--canaries-per-level", type=int, default=8)
    p.add_argument("--classes", default=",".join(t.name for t in CLASSES), help="timing classes, comma-separated")
    p.add_argument("--baseline", help="also run this git revision's tool against each class, side by side")
    p.add_argument("--engine", action="store_true", help="also the embedded engine part")
    p.add_argument("--levels", default="0,1,2,4,8,16,32,64", help="the embedded engine part's levels")
    p.add_argument("--compare", action="store_true", help="engine part: also with the holding off, side by side")
    args = p.parse_args()
    if args.quick:
        args.canaries_per_level = 3
    names = args.classes.split(",")
    unknown = sorted(set(names) - {t.name for t in CLASSES})
    if unknown:
        p.error(f"--classes: unknown {', '.join(unknown)}")
    print(f"command: {command_line()}")
    with tempfile.TemporaryDirectory(prefix="bench-fidelity-") as tmp_:
        tmp = Path(tmp_)
        timing_part(tmp, [t for t in CLASSES if t.name in names], args.canaries_per_level, args.baseline)
        if args.engine:
            engine_part(tmp, args.levels, args.canaries_per_level, args.compare)


if __name__ == "__main__":
    main()
