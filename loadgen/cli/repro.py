"""``loadgen repro RUN_DIR --canary ID [--record N] [--out DIR]``: a minimal reproducer of one canary record.

A thin edge over ``reports.repro.folder``: read the run folder, pick the record (``reports.repro.choice.select``), read
that record and the reference record back from their ``canaries*.jsonl`` files, stream the background
rows that overlapped it, check that the replay scenario validates, and write the folder (default
``RUN_DIR/repro-<id>-<n>/``). An existing folder is reused only when it is a real folder holding nothing but
files of the reproducer's names, which are replaced (``loadgen.core.runfiles.output_folder``); no file is
written through a link. Unusable input raises a ``LoadgenError`` (the CLI exits 2).

No API key is ever written: the files hold only the recorded request body and the key variable's name;
as a last guard, the value of that variable, where set here, is redacted from every file. The command of the
engine a replay would start is rendered here, by the launchers' own rule (``loadgen.launchers.approval``), so
that the README and ``replay.sh`` show what ``loadgen run`` will ask approval for; a command that cannot be
shown as it runs (a control character) is refused.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from collectors.jsonl import iter_objects
from loadgen.core.errors import RunFolderError, UsageError, redact
from loadgen.core.runfiles import output_folder, write_file

CANARY_ID = re.compile(r"[A-Za-z0-9_.-]+")


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "repro",
        help="write a minimal reproducer of one canary record: request, endpoint, load in flight, replay",
        description="Write a folder to attach to an engine's issue tracker: the exact request of one canary record, "
        "the endpoint and server it went to, the load in flight, the reference beside it and a replay script.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run folder")
    p.add_argument("--canary", required=True, metavar="ID", help="the canary's id (as in the report)")
    p.add_argument(
        "--record",
        type=int,
        metavar="N",
        help="the N-th record of that canary, counted from 1 in send order, warm-up, baseline and failures "
        "included (default: its first record that diverged from the reference)",
    )
    p.add_argument("--out", type=Path, metavar="DIR", help="output folder (default: RUN_DIR/repro-<id>-<n>)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = write_repro(args.run_dir, args.canary, args.record, args.out)
    print(out)  # the last line: the folder, as every command's
    return 0


def write_repro(run_dir: Path, canary: str, record: int | None, out: Path | None = None) -> Path:
    """Write the reproducer folder; returns its path."""
    # imported here, not at the top: ``loadgen --help`` builds this parser and must not load the command's stack
    from collectors.read.runfolder import load_run
    from loadgen.core.scenario.schema import parse_scenario
    from reports.repro.choice import select
    from reports.repro.folder import FILES, build_folder
    from reports.repro.in_flight import lifetime, overlaps

    if not CANARY_ID.fullmatch(canary):  # a scenario's ids are such; it names the folder and lands in replay.sh
        raise UsageError(f"--canary {canary!r}: expected letters, digits, '_', '.' or '-' only (a canary id)")
    try:
        run = load_run(run_dir)
    except RunFolderError as exc:  # name the argument at fault: the folder given as RUN_DIR
        raise RunFolderError(f"RUN_DIR: {exc}") from None
    choice = select(run, canary, record)
    wanted = {(choice.file, choice.request_id)}
    if choice.ref_file is not None and choice.ref_request_id is not None:
        wanted.add((choice.ref_file, choice.ref_request_id))
    raw = _raw_records(run_dir, wanted)
    mine = raw[choice.request_id]
    reference = raw.get(choice.ref_request_id) if choice.ref_request_id else None
    start, end = lifetime(mine)
    background = (r for r in _background_rows(run_dir) if overlaps(r, start, end))
    files, scenario = build_folder(run, choice, mine, reference, background, _engine_command(run_dir))
    parse_scenario(scenario, "replay.toml")  # a replay that would not load is a bug here, never a file
    target = out if out is not None else run_dir / f"repro-{choice.canary_id}-{choice.number}"
    try:
        output_folder(target, FILES)
    except OSError as exc:
        raise UsageError(f"--out {target}: cannot create the folder ({exc.strerror or exc})") from None
    secret = _secret(run.manifest.endpoint.api_key_env)
    for name, data in files.items():
        text = data.decode()
        try:
            write_file(target / name, redact(text, secret), mode=0o777 if name.endswith(".sh") else 0o666)
        except OSError as exc:
            raise UsageError(f"--out {target}: cannot write {name} ({exc.strerror or exc})") from None
    return target


def _engine_command(run_dir: Path) -> Callable[[dict[str, Any]], str]:
    """The command a replay's ``[launcher]`` table starts, as ``loadgen run`` shows it for approval."""
    from pydantic import ValidationError

    from loadgen.core.scenario import LauncherSpec
    from loadgen.launchers.approval import command_to_approve, showable

    def command(table: dict[str, Any]) -> str:
        try:
            spec = LauncherSpec.model_validate(table)
        except ValidationError:
            raise RunFolderError(
                f"{run_dir / 'manifest.json'}: field scenario.launcher: not a launcher this version starts"
            ) from None
        shown = command_to_approve(spec)
        if not showable(shown):
            raise RunFolderError(
                f"{run_dir / 'manifest.json'}: the engine's command holds a control character: a replay could not "
                "show it as it would run; not written"
            )
        return shown

    return command


def _raw_records(run_dir: Path, wanted: set[tuple[str, str]]) -> dict[str, dict[str, Any]]:
    """The raw canary records with the wanted (file, request id) pairs, read back from their files."""
    found: dict[str, dict[str, Any]] = {}
    for name in sorted({f for f, _ in wanted}):
        ids = {rid for f, rid in wanted if f == name}
        for row in iter_objects(run_dir / name, []):
            rid = row.get("request_id")
            if rid in ids:
                found[str(rid)] = row
    missing = {rid for _, rid in wanted} - found.keys()
    if missing:
        raise RunFolderError(f"{run_dir}: canary record(s) {sorted(missing)} could not be read back")
    return found


def _background_rows(run_dir: Path) -> Iterator[dict[str, Any]]:
    for path in sorted(run_dir.glob("background*.jsonl")):
        yield from iter_objects(path, [])


def _secret(env_name: str | None) -> str | None:
    return os.environ.get(env_name) if env_name else None
