"""The ``loadgen`` command line: parse, call one library function, render errors, pick the exit code.

The only place that prints errors: library code raises ``LoadgenError`` subclasses, rendered here as
one message and exit code 2 (unusable input); a command returns its own code otherwise. Messages
quote what endpoints and engines sent (error bodies, log tails), so every control character in them
is printed as an escape (``\x1b``, ``loadgen.core.errors.visible``): a hostile server must not retitle,
clear or drive the terminal.
"""

from __future__ import annotations

import argparse
import sys

from loadgen import __version__
from loadgen.cli import serve
from loadgen.core.errors import LoadgenError, visible


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loadgen", description="Does this endpoint give the same temperature-0 answer when it is busy?"
    )
    parser.add_argument("--version", action="version", version=f"loadgen {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # imported here, not at the top: ``loadgen serve`` (handled before this) must not load reports or Locust
    from loadgen.cli import check, coldboot, compare, export, matrix, onset, report, repro, run

    for module in (run, serve, report, compare, check, export, coldboot, matrix, onset, repro):
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        # every argument after "serve" is the engine's, --help included
        return serve.run(argparse.Namespace(command="serve", engine_args=argv[1:]))
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except LoadgenError as exc:
        print(f"loadgen {args.command}: error: {visible(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"loadgen {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
