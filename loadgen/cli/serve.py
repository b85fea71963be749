"""``loadgen serve``: the embedded engine in the foreground; arguments belong to ``loadgen.engine.cli``."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        add_help=False,
        help="start the embedded OpenAI-compatible CPU engine, or one side of a prefill/decode pair (--role; "
        "see 'loadgen serve --help')",
    )
    p.add_argument("engine_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from loadgen.engine.cli import main

    return main(list(args.engine_args))
