"""``loadgen report RUN_DIR``: write report.json, report.md and report.html into a run folder.

A thin edge over the reports package (``collectors.read.runfolder.load_run``,
``reports.analysis.build.build_report``, ``reports.render.writer.write_report_files``, the three steps of
``write_reports``): parse arguments, call the library, print where the files went and the verdict. A big folder
takes a while, so each step is shown on standard error as it starts (``loadgen/cli/progress``: in place on a
terminal, a line otherwise); ``--quiet`` prints only the run folder, which is every command's last line. Unusable
input raises ``RunFolderError`` (the CLI exits 2).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from loadgen.core.errors import visible


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("report", help="analyse a run folder: report.json, report.md, report.html")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run folder (manifest.json, canaries*.jsonl)")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    p.add_argument(
        "--engine-trace",
        type=Path,
        nargs="+",
        default=[],
        metavar="FILE",
        help="engine step trace files (engine_steps*.jsonl) from an engine the tool did not start: copied into the "
        "run folder as engine_steps-brought-NAME.jsonl and joined to the canaries (docs/design.md, the engine step "
        "trace)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # imported here, not at the top: ``loadgen --help`` builds this parser and must not load the command's stack
    from collectors.read.runfolder import load_run
    from loadgen.cli.progress.printer import open_display
    from reports.analysis.build import build_report
    from reports.render.writer import write_report_files

    display = open_display(args.quiet)
    try:
        display.status(visible(f"reading {args.run_dir}"))
        bring_traces(args.engine_trace, Path(args.run_dir))
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
            if steps := entry.get("engine_steps"):
                print(visible(f"{entry['id']}: why: {steps['sentence']}"))
        print(f"wrote {args.run_dir / 'report.json'}, report.md, report.html")
    print(args.run_dir)  # the last line: the run folder, as every command's
    return 0


def bring_traces(traces: list[Path], run_dir: Path) -> None:
    """Each trace copied into the run folder, where every later report reads it too; a file that is not a
    regular file (missing, a link, a device) is refused by name before anything is copied."""
    from loadgen.core.errors import RunFolderError
    from loadgen.core.runfiles import copy_file, regular_size

    if traces and not (run_dir / "manifest.json").is_file():
        raise RunFolderError(f"{run_dir}: not a run folder (no manifest.json) to bring an engine trace into")
    for trace in traces:
        if not trace.exists():
            raise RunFolderError(f"--engine-trace {trace}: no such file")
        regular_size(trace, limit=1 << 40)
    for trace in traces:
        copy_file(trace, run_dir / f"engine_steps-brought-{trace.stem.removeprefix('engine_steps-')}.jsonl")
