"""The report side's reader of the re-score records: every ``rescores*.jsonl`` of a run folder.

Why: the re-score check (docs/design.md, "The re-score check") is judged from these records alone; a torn or
corrupt line (a killed process) is skipped and counted, never guessed at. Reads; computes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from collectors.jsonl import LINE_LIMIT, iter_objects
from loadgen.core.rescore_record import RESCORE_FILE_GLOB, RescoreRecord


@dataclass(frozen=True)
class RescoresRead:
    records: list[RescoreRecord]
    files: list[str]  # the files read, by name
    skipped: int  # lines that were not a whole record


def read_rescores(run_dir: Path, line_limit: int = LINE_LIMIT) -> RescoresRead:
    """Every re-score record of ``run_dir``, in file-name then line order (none longer than ``line_limit``)."""
    records: list[RescoreRecord] = []
    files, skipped = [], 0
    for path in sorted(run_dir.glob(RESCORE_FILE_GLOB)):
        lines: list[int] = []
        records += [
            RescoreRecord.from_dict(raw, where=f"{path.name}") for raw in iter_objects(path, lines, limit=line_limit)
        ]
        files.append(path.name)
        skipped += len(lines)
    return RescoresRead(records, files, skipped)
