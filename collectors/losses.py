"""Records a run could not write: the write failures each process counted, read back from the run folder.

Why: a full disk or a file-size limit makes appends fail (or stop halfway through a line) while the
run goes on. Each Locust process counts its own failures (``JsonlWriter``) and writes them into
``process-<worker>.json`` at its end; the run's owner settles the status from this sum
(``finished_with_losses``) and the report shows it. Reads only; never raises for a missing or
unreadable process file (that is counted too: its failures are unknown), except for a link or special
file in its place, which ``loadgen.core.runfiles`` refuses with a ``RunFolderError`` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from loadgen.core.runfiles import read_regular

# keys of process-<worker>.json (written by loadgen/load/user_side.py) -> keys of the sum
_FIELDS = {"canary_write_failures": "canaries", "background_write_failures": "background"}


@dataclass(frozen=True)
class ProcessFiles:
    """What the run folder's ``process-*.json`` say, read once: ``failures``, ``{"canaries": n, "background": n,
    "processes": n, "unreadable": n}`` summed over them (``unreadable``: files that could not be read, their
    failures unknown); ``notices``, those every file carries (the held-level gate's), each once, in file order
    (a value that is not a list of strings adds none)."""

    failures: dict[str, int]
    notices: list[str]


def read_processes(run_dir: Path) -> ProcessFiles:
    failures = {"canaries": 0, "background": 0, "processes": 0, "unreadable": 0}
    notices: list[str] = []
    for path in sorted(Path(run_dir).glob("process-*.json")):
        failures["processes"] += 1
        try:
            info = orjson.loads(read_regular(path))
        except (OSError, orjson.JSONDecodeError):
            failures["unreadable"] += 1
            continue
        if not isinstance(info, dict):
            failures["unreadable"] += 1
            continue
        for key, name in _FIELDS.items():
            value = info.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                failures[name] += value
        said = info.get("notices")
        for notice in said if isinstance(said, list) else []:
            if isinstance(notice, str) and notice not in notices:
                notices.append(notice)
    return ProcessFiles(failures, notices)


def lost_records(failures: dict[str, int], *engine_metrics: Mapping[str, object] | None) -> int:
    """Records of every kind that could not be written: canary and background rows, ``/metrics`` samples (the
    endpoint's scraper's and each server's, one summary each)."""
    extra = 0
    for summary in engine_metrics:
        metrics = (summary or {}).get("write_failures")
        extra += metrics if isinstance(metrics, int) and not isinstance(metrics, bool) and metrics > 0 else 0
    return failures.get("canaries", 0) + failures.get("background", 0) + extra
