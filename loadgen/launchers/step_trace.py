"""The step trace of an engine this tool starts: the folder it is told to write in, and its files moved out.

Why this module exists: an engine started here is told ``LOADGEN_STEP_TRACE`` (docs/design.md, "The engine step
trace"), but it starts before its run folder exists (the run is named after the probe, which needs the engine
up), so it writes into the temporary folder that holds its log. Once the run folder exists its files are moved
in beside the log (an engine goes on writing into a moved file: open files follow a rename), and again when the
engine stops, for a file a process opened later (a vLLM engine-core's first step, a restart). Only files that
match ``engine_steps*.jsonl`` move; nothing here starts or stops a process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from loadgen.core.steptrace import ENV, FILE_GLOB


def trace_env(folder: Path) -> dict[str, str]:
    """What an engine's environment gets so that it writes its step trace into ``folder``."""
    return {ENV: str(folder)}


def trace_folder(env: Mapping[str, str] | None) -> Path | None:
    """The folder ``env`` tells an engine to write its trace in, or None."""
    value = (env or {}).get(ENV)
    return Path(value) if value else None


def move_traces(source: Path, target: Path) -> list[Path]:
    """Every trace file in ``source`` renamed into ``target`` (same file system), the paths it now has. A file of
    the same name already in ``target`` is left where it is (a name holds a host and a process id)."""
    moved: list[Path] = []
    if source.resolve() == target.resolve():
        return moved
    for path in sorted(source.glob(FILE_GLOB)):
        dest = target / path.name
        if dest.exists():
            continue
        os.replace(path, dest)
        moved.append(dest)
    return moved
