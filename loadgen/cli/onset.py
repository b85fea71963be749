"""``loadgen onset [SCENARIO]``: argument parsing for ``loadgen.studies.onset.onset``; prints one line per level
as it is decided, then the onset, the rule that called levels clean, the 95% bound the clean levels tried give
(none when no level tried was clean), the risk, and the study folder, last. Progress goes to standard error,
as ``loadgen run``'s (``loadgen/cli/progress``; ``--quiet``: none). Exit 0 when the search decided (an onset,
or none up to --max-level), 1 when it stopped at an inconclusive level."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from loadgen.cli.arguments.scenario import scenario_path
from loadgen.core.errors import visible
from loadgen.core.options import parse_labels
from scenarios import names


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "onset",
        help="find the lowest background level at which the canary diverges (doubling, then bisection)",
        description="One run per visited level (1, 2, 4, ... up to --max-level until one diverges, then "
        "bisection); writes onset.json and every level's run folder and report.",
    )
    p.add_argument(
        "scenario", nargs="?", default="quickstart", help=f"scenario file, or a shipped one: {', '.join(names())}"
    )
    p.add_argument("--host", help="endpoint base URL (default: the scenario's, else the embedded engine)")
    p.add_argument("--max-level", type=int, default=32, help="highest background level to try (default 32)")
    p.add_argument("--out", type=Path, default=Path("runs"), help="folder that receives the onset study folder")
    p.add_argument("--canaries-per-level", type=int, help="canaries sent at each visited level (the rule's n)")
    p.add_argument("--label", action="append", default=[], help="k=v recorded in every run's manifest (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        help="argument passed to the embedded engine, e.g. --engine-arg=--batch-invariant",
    )
    p.set_defaults(func=run)


def _level_line(r: Any) -> str:
    what = f"{r.canaries} canaries, {r.diverged} diverged"
    if r.diverged and r.divergence_rate_ci95 is not None:
        low, high = r.divergence_rate_ci95
        what += f" (rate 95% CI {low:.1%}–{high:.1%})"
    if r.earliest_divergence is not None:
        what += f", earliest at token {r.earliest_divergence}"
    if measured := r.measured_levels:  # what its canaries were measured beside, which the search goes by
        what += "; measured " + ", ".join(
            f"{level} {'divergent' if diverged else 'clean'}" for level, diverged in sorted(measured.items())
        )
    if r.reason:
        what += f": {r.reason}"
    return f"level {r.level}: {r.verdict} ({what})  {r.run_dir}"


def run(args: argparse.Namespace) -> int:
    from loadgen.cli.progress.printer import progress_shown
    from loadgen.studies.onset import RISK, bound_line, onset, rule_block

    with progress_shown(args.quiet) as progress:
        result = onset(
            scenario_path(args.scenario),
            host=args.host,
            max_level=args.max_level,
            out_dir=args.out,
            canaries_per_level=args.canaries_per_level,
            labels=parse_labels(args.label),
            engine_args=args.engine_arg,
            on_level=lambda r: progress.out([visible(_level_line(r))]),
            progress=progress,
        )
    tried = ", ".join(str(r.level) for r in result.levels) or "none"
    sent = sum(r.sent for r in result.levels)
    swept = sum(r.canaries for r in result.levels)
    if result.stopped:
        print(visible(f"search stopped: {result.stopped}"))
    elif result.onset_level is None:
        print(f"onset: none up to level {result.max_level} (highest clean level {result.highest_clean_level})")
    else:
        print(f"onset: level {result.onset_level} (highest clean level {result.highest_clean_level})")
    print(f"levels tried: {tried}; {sent} canaries sent, {swept} of them at the levels")
    print(f"rule: {rule_block(result.canaries_per_level)['clean']}")
    print(visible(f"bound: {bound_line(result)}"))  # what the clean levels tried bound, not the rule's promise
    print(f"risk: {RISK}")
    print(result.out_dir / "onset.json")
    print(result.out_dir)  # the last line: scripts take the study folder from it
    return 0 if result.decided else 1
