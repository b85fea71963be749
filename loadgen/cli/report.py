"""``loadgen report RUN_DIR``: write report.json, report.md and report.html into a run folder.

A thin edge over ``reports.writer.write_reports``: parse arguments, call the library, print where the
files went and the verdict. Unusable input raises ``RunFolderError`` (the CLI exits 2).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from reports.writer import write_reports


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("report", help="analyse a run folder: report.json, report.md, report.html")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run folder (manifest.json, canaries*.jsonl)")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    report = write_reports(args.run_dir)
    if not args.quiet:
        for entry in report["canaries"]:
            print(f"{entry['id']}: {entry['verdict']}")
        print(f"wrote {args.run_dir / 'report.json'}, report.md, report.html")
    return 0
