"""``loadgen run``: argument parsing for ``loadgen.studies.run.run``; prints the run folder, last, after
the status of a run that did not finish cleanly, what its report says first (the endpoint failed,
records were lost) and the summary (each canary's verdict and per-level table, report.md's words).

Standard output holds only those lines, the run folder always the last: scripts take it from there.
Progress goes to standard error while the run goes (``loadgen/cli/progress``): a view updated in place
on a terminal, plain lines otherwise; ``--quiet`` shows no progress and no summary."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadgen.cli.arguments.scenario import scenario_path
from loadgen.core.claims import validate_rate
from loadgen.core.errors import UsageError, visible
from loadgen.core.options import (
    WEB_PASSWORD_ENV,
    WEB_USER_ENV,
    levels_option,
    parse_labels,
    parse_processes,
    port_option,
    web_credentials,
)
from loadgen.core.web_guard import is_loopback
from scenarios import names

if TYPE_CHECKING:
    from loadgen.core.manifest import RunStatus
    from reports.model.report import Report


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "run",
        help="run a scenario (default: quickstart on the embedded engine) and write its report",
        description="Send the scenario's canaries under stepped background load and record every completion.",
    )
    p.add_argument(
        "scenario", nargs="?", default="quickstart", help=f"scenario file, or a shipped one: {', '.join(names())}"
    )
    p.add_argument("--host", help="endpoint base URL (default: the scenario's, else the embedded engine)")
    p.add_argument(
        "--api-key-env",
        metavar="NAME",
        help="the environment variable holding the endpoint's API key (replaces the scenario's endpoint.api_key_env)",
    )
    p.add_argument("--out", type=Path, default=Path("runs"), help="folder that receives the run folder")
    p.add_argument("--levels", help="comma-separated concurrency levels, e.g. 0,4,16")
    p.add_argument("--canaries-per-level", type=int, help="canaries sent at each level")
    p.add_argument(
        "--claim-max-rate",
        metavar="P",
        help="claim 'divergence rate < P at 95%%': send at least ceil(ln 0.05 / ln(1-P)) canaries per level and "
        "canary (about 3/P), end a level early once a divergence makes the claim impossible; 0 < P < 1",
    )
    p.add_argument("--label", action="append", default=[], help="k=v recorded in the manifest (repeatable)")
    p.add_argument("--ui", action="store_true", help="open Locust's web UI instead of running headless")
    p.add_argument("--web-port", type=int, default=8089, help="web UI port (with --ui)")
    p.add_argument(
        "--web-host",
        default="127.0.0.1",
        help="web UI bind address (with --ui; default: localhost only; any other needs --web-login)",
    )
    p.add_argument(
        "--web-login",
        action="store_true",
        help=f"with --ui: ask for a user name and password (${WEB_USER_ENV}, default 'loadgen'; ${WEB_PASSWORD_ENV})",
    )
    p.add_argument(
        "--ui-allow-changes",
        action="store_true",
        help="with --ui: let a start from the form change host, scenario and out-dir (default: fixed here)",
    )
    p.add_argument(
        "--processes",
        default="0",
        help="run Locust's users in N worker processes (-1: one per core; auto: one per core but one, none on "
        "2 cores or fewer); 0: one process. A report says when a level was generator-bound",
    )
    p.add_argument("--no-report", action="store_true", help="skip writing report.json/.md/.html")
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no progress on stderr and no summary: print only the run folder (and a status that is not 'finished')",
    )
    p.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        help="argument passed to the embedded engine, e.g. --engine-arg=--batch-invariant",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # imported here, not at the top: ``loadgen --help`` builds every parser and must not load the run's stack
    from loadgen.cli.progress.printer import progress_shown
    from loadgen.cli.progress.summary import headline_of, read_report
    from loadgen.core.manifest import RunStatus
    from loadgen.core.request import RunRequest, WebUi
    from loadgen.studies.events import ProgressEvent, RunEnded
    from loadgen.studies.run import run as run_scenario

    if not args.ui and (args.web_login or args.ui_allow_changes):
        raise UsageError("--web-login and --ui-allow-changes go with --ui")
    claim = None if args.claim_max_rate is None else validate_rate(args.claim_max_rate)
    levels = levels_option(args.levels)  # '' is refused here, not read as the scenario's levels
    if args.ui:
        port_option(args.web_port, "--web-port")  # before an engine starts or a run folder is announced
    if args.api_key_env is not None and args.ui:
        raise UsageError("--api-key-env goes without --ui (with --ui: set endpoint.api_key_env in the scenario)")
    if claim is not None and args.ui:
        raise UsageError("--claim-max-rate goes without --ui (with --ui: set sweep.claim_max_rate)")
    if args.ui and not is_loopback(args.web_host):
        if not args.web_login:
            raise UsageError(
                f"--web-host {args.web_host}: the web UI would answer any host name on a reachable address; "
                "add --web-login (its password is sent in clear: use it on a trusted network only)"
            )
        print(
            f"loadgen run: web UI bound to {args.web_host}: it answers any host name (no loopback check); "
            "a login is required",
            file=sys.stderr,
        )
    if args.web_login:
        web_credentials()  # a missing password fails here, before an engine starts
    with progress_shown(args.quiet) as progress:

        def shown(event: ProgressEvent) -> None:
            progress(event)
            if isinstance(event, RunEnded):  # a run started from the web UI: its end, as a headless run's
                report = read_report(event.run_dir)
                progress.out(end_lines(event.run_dir, event.status, headline_of(report), report, args.quiet))

        ui = WebUi(args.web_host, args.web_port, args.web_login, args.ui_allow_changes) if args.ui else None
        request = RunRequest(
            scenario_path(args.scenario),
            host=args.host,
            api_key_env=args.api_key_env,
            out_dir=args.out,
            levels=None if levels is None else tuple(levels),
            canaries_per_level=args.canaries_per_level,
            labels=parse_labels(args.label),
            claim_max_rate=claim,
            engine_args=tuple(args.engine_arg),
            processes=parse_processes(args.processes),
            report=not args.no_report,
            ui=ui,
        )
        result = run_scenario(request, progress=shown)
    if args.ui:  # each run's end is printed as it came; nothing more: the last line is the last run's folder
        # the session exits as its last run would headless: Ctrl-C while a run goes ends it interrupted, exit 1
        unfinished = result.status is not None and result.status != RunStatus.FINISHED
        return result.locust_exit or int(unfinished)
    report = read_report(result.run_dir)
    for line in end_lines(result.run_dir, result.status, result.headline, report, args.quiet):
        print(line)
    return 0 if result.status == RunStatus.FINISHED else 1


def end_lines(
    run_dir: Path, status: RunStatus | None, headline: list[str], report: Report | None, quiet: bool
) -> list[str]:
    """What ends a run on standard output: a status that is not 'finished', what the report says first (the
    endpoint failed, records were lost), the summary (not with ``--quiet``), and the run folder, last."""
    from loadgen.cli.progress.summary import summary_lines
    from loadgen.core.manifest import RunStatus

    lines = [f"run {status}"] if status is not None and status != RunStatus.FINISHED else []
    lines += [visible(line) for line in headline]
    if not quiet and report is not None:
        lines += summary_lines(report)
    return [*lines, str(run_dir)]  # the last line: scripts take the run folder from it
