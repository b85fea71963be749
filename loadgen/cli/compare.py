"""``loadgen compare RUN_DIR... --out DIR``: runs side by side (comparison.json/.md/.html).

A thin edge over ``reports.compare_reports`` and ``reports.write_comparison``. Each argument is a run
folder (re-analysed from its records) or a ``report.json``; the first is the base for deltas and for the
reference check (each later run's reference completions against the first run's). A cold-boot
run's ``coldboot.json`` beside it joins the comparison (``comparison.json``'s ``coldboot``). The
pages name the runs A, B, ... in argument order (``comparison.json`` keeps each run's ``label``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from loadgen.core.errors import UsageError


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "compare", help="put 2..N runs side by side (named A, B, ... in argument order), with deltas against the first"
    )
    p.add_argument("runs", type=Path, nargs="+", metavar="RUN_DIR", help="run folders or report.json files")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="where comparison.* are written")
    p.set_defaults(func=run)


def _name(path: Path) -> str:
    return path.parent.name if path.name == "report.json" else path.name


def run(args: argparse.Namespace) -> int:
    # imported here, not at the top: ``loadgen --help`` builds this parser and must not load the command's stack
    from reports.compare.runs import coldboot_of, compare_reports, run_names, write_comparison
    from reports.render.writer import load_report

    if len(args.runs) < 2:
        raise UsageError("compare: give at least two RUN_DIR arguments")
    loaded = [(_name(p), load_report(p)) for p in args.runs]
    reports = list(zip(run_names(loaded), (r for _, r in loaded), strict=True))  # two folders of one name
    base = reports[0][0]
    bases = {name: base for name, _ in reports[1:]}  # every run's reference against run A's: alone, the same answer?
    cmp = compare_reports(reports, bases, coldboot=[coldboot_of(p) for p in args.runs])  # a cold-boot run's too
    paths = write_comparison(cmp, reports, args.out)
    print("wrote " + ", ".join(str(p) for p in paths))
    print(args.out)  # the last line: the folder, as every command's
    return 0
