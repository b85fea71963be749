"""``loadgen coldboot SCENARIO``: argument parsing for ``loadgen.studies.coldboot.cold_boot``; prints the cold-boot
table, then the run folder (the last line, as every command's). Exit 0 when every boot ran, 1 when the study
stopped early.

Progress (boot j of m, each engine's start time, request k of n) goes to standard error while the study
runs, as ``loadgen run``'s does (``loadgen/cli/progress``); ``--quiet`` shows none."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from loadgen.cli.arguments.scenario import scenario_path
from loadgen.core.options import parse_labels
from scenarios import names


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "coldboot",
        help="restart the engine K times and send the canaries N times after each boot (first request vs rest)",
        description="For each of K boots: start the scenario's [launcher] (default: the embedded engine), wait "
        "for health, send each canary N times one at a time; report whether request 1 differs from 2..N.",
    )
    p.add_argument("scenario", help=f"scenario file, or a shipped one: {', '.join(names())}")
    p.add_argument("--boots", type=int, help="engine starts (default: the scenario's [cold_boot], else 6)")
    p.add_argument("--requests", type=int, help="requests per canary per boot, >= 2 (default: scenario's, else 6)")
    p.add_argument("--out", type=Path, default=Path("runs"), help="folder that receives the run folder")
    p.add_argument("--label", action="append", default=[], help="k=v recorded in the manifest (repeatable)")
    p.add_argument("--no-report", action="store_true", help="skip report.json/.md/.html (coldboot.* are written)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr (boots, engine start times, requests)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from loadgen.cli.progress.printer import progress_shown
    from loadgen.core.manifest import RunStatus
    from loadgen.studies.coldboot import cold_boot

    with progress_shown(args.quiet) as progress:
        result = cold_boot(
            scenario_path(args.scenario),
            out_dir=args.out,
            boots=args.boots,
            requests=args.requests,
            labels=parse_labels(args.label),
            report=not args.no_report,
            progress=progress,
        )
    print((result.run_dir / "coldboot.md").read_text(encoding="utf-8"), end="")
    print(result.run_dir)  # the last line: scripts take the run folder from it
    return 0 if result.status == RunStatus.FINISHED else 1
