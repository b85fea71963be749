"""``loadgen check RUN_DIR [thresholds]``: the CI gate. Exit 0 pass, 1 a threshold breached; unusable
input raises a ``LoadgenError`` (the CLI exits 2).

Each threshold option may repeat; its value is ``N`` (overall), ``N@LEVEL`` (one concurrency level)
or ``N@each`` (every level); a value outside its range (a rate above 1, a negative count) is refused
(exit 2). Every check also fails a run that did not finish, a planned level without completions, lost
records, more than ``--max-error-rate`` (default 0.05) failed canaries, and a planned level whose load was not there
(``levels[].not_measured``; ``--allow-unmeasured-levels`` lets it pass) (``reports.analysis.check.integrity``).
``--junit FILE`` writes JUnit XML, one test case per threshold and per integrity check.
``--claim-max-rate P`` (``loadgen.core.claims``) fails unless every planned level supports "divergence rate < P
at 95%"; it may be the only option given.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from loadgen.core.claims import validate_rate
from loadgen.core.errors import RunFolderError, UsageError
from loadgen.core.thresholds import (
    DEFAULT_MAX_ERROR_RATE,
    METRICS,
    RESCORE_METRICS,
    SEED_METRICS,
    Threshold,
    limit_of,
)

HELP = {
    "max_unique": "most unique completions allowed",
    "max_divergence_rate": "highest divergence rate allowed (0..1)",
    "min_earliest_divergence": "earliest divergence must be at this token or later",
    "max_errors": "most failed canaries allowed",
    "max_seed_mismatch": "highest share of a sampled canary's completions unlike its seeded baseline (0..1)",
    "max_seed_collision": "highest share of a seeds set's completions equal across different seeds (0..1)",
    "max_duplicate_choices": "highest share of n > 1 choices repeating an earlier choice of their request (0..1)",
    "max_route_mismatch": "highest share of one seed's completions on another route unlike the first route's (0..1)",
    "max_rescore_mismatch": "highest share of re-scored completions whose logprobs are not bitwise the decode's, "
    "alone and at level (0..1; unmeasured fails)",
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("check", help="gate CI on a run: exit 0 pass, 1 threshold breached, 2 bad input")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run folder or a report.json")
    for metric in [*METRICS, *SEED_METRICS, *RESCORE_METRICS]:
        p.add_argument(
            "--" + metric.replace("_", "-"),
            dest=metric,
            action="append",
            default=[],
            metavar="N[@LEVEL|@each]",
            help=HELP[metric] + "; overall, at one level, or at each level",
        )
    p.add_argument(
        "--max-error-rate",
        default=str(DEFAULT_MAX_ERROR_RATE),
        metavar="R",
        help=f"highest share of failed canaries allowed, 0..1 (default {DEFAULT_MAX_ERROR_RATE:g}); checked on "
        "every run, like a finished status, completions at every planned level and no lost records",
    )
    p.add_argument(
        "--claim-max-rate",
        metavar="P",
        help="fail unless every planned level supports 'divergence rate < P at 95%%' (exact binomial), 0 < P < 1",
    )
    p.add_argument(
        "--allow-unmeasured-levels",
        action="store_true",
        help="pass a run whose levels' load was not there (background failed, canaries outside the level's band: "
        "report.json levels[].not_measured); by default such a run fails as evidence incomplete",
    )
    p.add_argument("--junit", type=Path, metavar="FILE", help="write JUnit XML here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # imported here, not at the top: ``loadgen --help`` builds this parser and must not load the report stack
    from reports.analysis.check import CheckResult, check_report, claim_outcomes, integrity, junit_xml
    from reports.analysis.rescore_gate import rescore_outcomes
    from reports.analysis.seed_check import seed_outcomes
    from reports.render.writer import load_report, write_text

    thresholds = [Threshold.parse(m, spec) for m in METRICS for spec in getattr(args, m)]
    seed_gates = [Threshold.parse(m, spec) for m in SEED_METRICS for spec in getattr(args, m)]
    rescore_gates = [Threshold.parse(m, spec) for m in RESCORE_METRICS for spec in getattr(args, m)]
    max_error_rate = limit_of("max_error_rate", args.max_error_rate)
    claim = None if args.claim_max_rate is None else validate_rate(args.claim_max_rate)
    if not thresholds and not seed_gates and not rescore_gates and claim is None:
        raise UsageError("check: give at least one threshold (--max-unique, --max-divergence-rate, ...)")
    report = load_report(args.run_dir)
    claims = claim_outcomes(report, claim) if claim is not None else []
    facts = integrity(report, max_error_rate, allow_unmeasured=args.allow_unmeasured_levels)
    seeds = seed_outcomes(report, seed_gates) + rescore_outcomes(report, rescore_gates)
    result = CheckResult(facts + check_report(report, thresholds).outcomes + claims + seeds)
    if args.junit is not None:
        if not args.junit.parent.is_dir():
            raise RunFolderError(f"--junit {args.junit}: folder {args.junit.parent} does not exist")
        write_text(args.junit, junit_xml(result))
    for o in result.outcomes:
        print(f"{'PASS' if o.passed else 'FAIL'}  {o.name}: {o.message}")
    failed = {int(o.scope.removeprefix("concurrency ")) for o in claims if not o.passed and o.scope != "run"}
    if failed:
        levels = ", ".join(map(str, sorted(failed)))  # in numeric order, as the report lists levels
        print(f"claim 'divergence rate < {claim:g} at 95%' not supported at: concurrency {levels}")
    print("check passed" if result.passed else "check FAILED")
    return 0 if result.passed else 1
