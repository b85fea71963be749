"""Append-only JSON-lines files: a writer that flushes per record and a reader that survives a torn tail.

Why: a killed process must lose nothing it finished writing, and a reader must not fail on the
half line such a process leaves behind. The writer counts its own failures, because Locust's
``EventHook.fire`` logs and swallows listener exceptions.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from loadgen.errors import RunFolderError


class JsonlWriter:
    """Appends one JSON object per line and flushes it to the OS before returning."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = open(path, "ab", buffering=0)  # noqa: SIM115 - lives as long as the writer
        self.written = 0
        self.failures = 0

    def write(self, obj: Any) -> bool:
        try:
            self._fh.write(orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
        except (OSError, TypeError):
            self.failures += 1
            return False
        self.written += 1
        return True

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()


@dataclass
class JsonlRead:
    rows: list[dict[str, Any]]
    skipped: int  # lines that were not a complete JSON object (a torn tail, or corruption)
    skipped_lines: list[int]  # 1-based line numbers skipped


def iter_objects(path: Path, skipped: list[int]) -> Iterator[dict[str, Any]]:
    """Each complete JSON object line of a JSONL file; appends the numbers of unreadable lines to ``skipped``."""
    try:
        with open(path, "rb") as fh:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError:
                    skipped.append(n)
                    continue
                if isinstance(obj, dict):
                    yield obj
                else:
                    skipped.append(n)
    except OSError as exc:
        raise RunFolderError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def read_jsonl(path: Path) -> JsonlRead:
    """Read every complete JSON object line; count (not raise on) lines that do not parse."""
    skipped: list[int] = []
    rows = list(iter_objects(path, skipped))
    return JsonlRead(rows=rows, skipped=len(skipped), skipped_lines=skipped)
