"""``loadgen export RUN_DIR [--out DIR]``: canary records as Parquet and CSV.

A thin edge over ``reports.export_records``; writes into the run folder unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("export", help="export canary records as Parquet and CSV")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run folder")
    p.add_argument("--out", type=Path, metavar="DIR", help="output folder (default: the run folder)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # imported here, not at the top: ``loadgen --help`` builds this parser and must not load the command's stack
    from collectors.read.runfolder import load_run
    from reports.render.export import export_records

    run = load_run(args.run_dir)
    for notice in (f.columns_notice for f in run.files if f.columns_notice):  # the records come from the JSONL there
        print(f"note: {notice}", file=sys.stderr)
    paths = export_records(run.canaries, args.out or args.run_dir)
    print("wrote " + ", ".join(str(p) for p in paths))
    print(args.out or args.run_dir)  # the last line: the folder, as every command's
    return 0
