"""``loadgen matrix SCENARIO --out DIR``: argument parsing for ``loadgen.studies.matrix.run_matrix``; prints the matrix
table. Exit 0 when every cell finished, 1 when any failed or stopped early.

Progress (cell k of n, boot j of m, each engine's start time, each run's canaries) goes to standard
error while the cells run, as ``loadgen run``'s does (``loadgen/cli/progress``); ``--quiet`` shows none."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from loadgen.cli.arguments.scenario import scenario_path
from loadgen.core.options import levels_option, parse_labels
from scenarios import names


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "matrix",
        help="run one scenario over the engine configurations in its [matrix] and compare them",
        description="Each [[matrix.cells]] entry is launcher args/env (or a base_url); each cell runs the "
        "scenario (a cold-boot study when it has [cold_boot], else a sweep), then the cells are compared.",
    )
    p.add_argument("scenario", help=f"scenario file, or a shipped one: {', '.join(names())}")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="where cells/, matrix.* and comparison.* go")
    p.add_argument("--boots", type=int, help="cold-boot matrices: engine starts per cell")
    p.add_argument("--requests", type=int, help="cold-boot matrices: requests per canary per boot (>= 2)")
    p.add_argument("--levels", help="sweep matrices: comma-separated concurrency levels")
    p.add_argument("--canaries-per-level", type=int, help="sweep matrices: canaries sent at each level")
    p.add_argument("--label", action="append", default=[], help="k=v recorded in every cell's manifest")
    p.add_argument(
        "--cells",
        help="comma-separated cell names: run only these (e.g. one GPU's share, or a failed cell again)",
    )
    p.add_argument(
        "--reuse",
        action="store_true",
        help="sweep matrices: a cell that already has a reported run in --out is compared as it is, not run again "
        "(shares of one matrix run side by side with --cells into the same --out, then compared together)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr (cells, boots, engine start times)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from loadgen.cli.progress.printer import progress_shown
    from loadgen.studies.matrix import run_matrix

    with progress_shown(args.quiet) as progress:
        result = run_matrix(
            scenario_path(args.scenario),
            out_dir=args.out,
            boots=args.boots,
            requests=args.requests,
            levels=levels_option(args.levels),
            canaries_per_level=args.canaries_per_level,
            labels=parse_labels(args.label),
            only=None if args.cells is None else [c.strip() for c in args.cells.split(",") if c.strip()],
            reuse=args.reuse,
            progress=progress,
        )
    print((args.out / "matrix.md").read_text(encoding="utf-8"), end="")
    print(args.out)  # the last line: scripts take the matrix's folder from it
    return 0 if result.ok else 1
