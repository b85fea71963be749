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
from pathlib import Path

import orjson

from loadgen.core.runfiles import read_regular

# keys of process-<worker>.json (written by loadgen/load/user_side.py) -> keys of the sum
_FIELDS = {"canary_write_failures": "canaries", "background_write_failures": "background"}


def write_failures(run_dir: Path) -> dict[str, int]:
    """``{"canaries": n, "background": n, "processes": n, "unreadable": n}`` summed over every
    ``process-*.json`` of the run folder; ``unreadable`` counts process files that could not be read."""
    out = {"canaries": 0, "background": 0, "processes": 0, "unreadable": 0}
    for path in sorted(Path(run_dir).glob("process-*.json")):
        out["processes"] += 1
        try:
            info = orjson.loads(read_regular(path))
        except (OSError, orjson.JSONDecodeError):
            out["unreadable"] += 1
            continue
        if not isinstance(info, dict):
            out["unreadable"] += 1
            continue
        for key, name in _FIELDS.items():
            value = info.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                out[name] += value
    return out


def lost_records(failures: dict[str, int], *engine_metrics: Mapping[str, object] | None) -> int:
    """Records of every kind that could not be written: canary and background rows, ``/metrics`` samples (the
    endpoint's scraper's and each server's, one summary each)."""
    extra = 0
    for summary in engine_metrics:
        metrics = (summary or {}).get("write_failures")
        extra += metrics if isinstance(metrics, int) and not isinstance(metrics, bool) and metrics > 0 else 0
    return failures.get("canaries", 0) + failures.get("background", 0) + extra


def process_notices(run_dir: Path) -> list[str]:
    """The ``notices`` every ``process-*.json`` carries (the held-level gate's), each once, in file order;
    an unreadable file or a value that is not a list of strings adds nothing."""
    out: list[str] = []
    for path in sorted(Path(run_dir).glob("process-*.json")):
        try:
            info = orjson.loads(read_regular(path))
        except (OSError, orjson.JSONDecodeError):
            continue
        notices = info.get("notices") if isinstance(info, dict) else None
        for notice in notices if isinstance(notices, list) else []:
            if isinstance(notice, str) and notice not in out:
                out.append(notice)
    return out
