"""``loadgen report RUN_DIR``: write report.json, report.md and report.html into a run folder.

A thin edge over the reports package (``collectors.read.runfolder.load_run``, ``reports.analysis.build.build_report``,
``reports.render.writer.write_report_files``, the three steps of ``write_reports``): parse arguments, call
the library, print where the files went and the verdict. A big folder takes a while, so each step is
shown on standard error as it starts (``loadgen/cli/progress``: in place on a terminal, a line
otherwise); ``--quiet`` prints nothing on success. Unusable input raises ``RunFolderError`` (the CLI
exits 2).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from collectors.read.runfolder import load_run
from loadgen.cli.progress.printer import open_display
from loadgen.core.errors import visible
from reports.analysis.build import build_report
from reports.render.writer import write_report_files


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("report", help="analyse a run folder: report.json, report.md, report.html")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run folder (manifest.json, canaries*.jsonl)")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    display = open_display(args.quiet)
    try:
        display.status(visible(f"reading {args.run_dir}"))
        data = load_run(args.run_dir)
        files = len(data.files) + len(data.background_files)
        display.status(f"analysing {data.canaries.n} canary records from {files} files")
        report = build_report(data)
        display.status("writing report.json, report.md, report.html")
        write_report_files(report, Path(args.run_dir))
    finally:
        display.close()
    if not args.quiet:
        for entry in report["canaries"]:
            print(f"{entry['id']}: {entry['verdict']}")
        print(f"wrote {args.run_dir / 'report.json'}, report.md, report.html")
    return 0
