"""The ``loadgen`` command line: parse, call one library function, render errors, pick the exit code.

The only place that prints errors: library code raises ``LoadgenError`` subclasses, rendered here as
one message and exit code 2 (unusable input); a command returns its own code otherwise. An option a
command does not know is refused with that command's usage and the nearest option it has ("did you
mean"); no parser takes an abbreviation (``--level`` is not ``--levels``). Messages
quote what endpoints and engines sent (error bodies, log tails), so every control character in them
is printed as an escape (``\x1b``, ``loadgen.core.errors.visible``): a hostile server must not retitle,
clear or drive the terminal.
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import sys

from loadgen import __version__
from loadgen.cli import serve
from loadgen.core.errors import LoadgenError, visible
from loadgen.core.stacks import dump_stacks_on_usr1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loadgen",
        description="Does this endpoint give the same temperature-0 answer when it is busy?",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"loadgen {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # imported here, not at the top: ``loadgen serve`` (handled before this) must not load reports or Locust
    from loadgen.cli import check, coldboot, compare, export, matrix, onset, report, repro, run

    for module in (run, serve, report, compare, check, export, coldboot, matrix, onset, repro):
        module.add_parser(sub)
    for command in sub.choices.values():
        command.allow_abbrev = False  # read at parse time: a prefix of an option is an unknown option
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed; an argument the command does not take ends here with the command's own usage (argparse
    would show the top-level one) and, for an option, the nearest one the command has; ``--engine-arg --flag``
    (a space, not ``=``) with the form that works."""
    for option, value in itertools.pairwise(argv):
        if option == "--engine-arg" and value.startswith("-"):  # argparse would take the flag for an option of ours
            _subcommand(parser, argv[0]).error(
                f"argument --engine-arg: expected one argument; an engine flag goes after '=': --engine-arg={value}"
            )
    args, unknown = parser.parse_known_args(argv)
    if not unknown:
        return args
    command = _subcommand(parser, args.command)
    hint = ""
    if unknown[0].startswith("-"):
        known = [s[2:] for action in command._actions for s in action.option_strings if s.startswith("--")]
        word = unknown[0].split("=", 1)[0].lstrip("-")
        longer = [k for k in known if k.startswith(word)]  # the prefix argparse would have taken
        close = longer if len(longer) == 1 else difflib.get_close_matches(word, known, n=1, cutoff=0.6)
        hint = f" (did you mean --{close[0]}?)" if close else ""
    command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found = action.choices.get(name)
            if isinstance(found, argparse.ArgumentParser):
                return found
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    dump_stacks_on_usr1()  # a process that hangs can be asked where (README, "Troubleshooting")
    if argv[:1] == ["serve"]:
        # every argument after "serve" is the engine's, --help included
        return serve.run(argparse.Namespace(command="serve", engine_args=argv[1:]))
    args = parse(build_parser(), argv)
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
