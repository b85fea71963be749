"""The engine step trace: one line per engine step, written by the engine that ran it, read by the report.

Why this module exists: whether a canary's logprobs moved depends on what each engine step that computed it
held (decode-only or mixed with others' prefills, how many requests and tokens), which no request count shows
(docs/design.md, "The engine step trace"). The writers are the embedded engine (natively) and the vLLM plugin
(``loadgen.plugins.vllm_steps``, inside vLLM's engine-core process); the reader is the report side. This module
is their one contract: the record, the file names, the folder a writer is told through ``ENV``, and the one rule
that maps an engine's request id back to the record that sent it.

It must stay light and safe inside a foreign engine process: the standard library and orjson only, no numpy,
no logging set-up, and a writer whose failures are counted, never raised into the step.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final, Literal

import orjson

from loadgen.core.runfiles import open_append

SCHEMA: Final = 1
ENV: Final = "LOADGEN_STEP_TRACE"  # a folder: each process that schedules steps writes its own file in it
FILE_GLOB: Final = "engine_steps*.jsonl"

Source = Literal["embedded", "vllm", "sglang"]

_KEY = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One engine step. The lists are parallel, one entry per request scheduled in the step.

    ``computed``: tokens the request had computed before this step (a prefix-cache hit counts as computed);
    ``scheduled``: tokens computed for it in this step; ``prompt``: its prompt's length. A row computes prompt
    tokens (prefill) while ``computed < prompt``, else it decodes; the row whose ``computed + scheduled`` equals
    ``prompt + j`` produced output position ``j`` (0-based), so its step is the one that computed position ``j``.

    ``local`` and ``external`` (optional; None: unknown, as in older traces and SGLang's): of ``computed``, the
    tokens the request found in this engine's own prefix cache and those loaded from outside it (an offload
    tier, a prefill/decode hand-over), on the request's first scheduled row; 0 on every other row.
    """

    step: int  # the writing process's own counter, from 0
    t: float  # epoch seconds when the step was scheduled
    ids: list[str]  # the engine's request ids (see ``record_key``)
    scheduled: list[int]
    computed: list[int]
    prompt: list[int]
    source: Source = "embedded"
    preempted: list[str] = field(default_factory=list)  # ids the engine preempted while scheduling this step
    local: list[int] | None = None
    external: list[int] | None = None
    schema: int = SCHEMA


def record_key(engine_id: str) -> str | None:
    """The canary or background record's ``request_id`` inside an engine's request id, or None.

    The client sends its record's ``request_id`` (32 hex digits) as ``X-Request-Id``; engines wrap it
    (vLLM: ``cmpl-<id>-<n>-<suffix>``, ``chatcmpl-<id>...``; the embedded engine: ``cmpl-<id>``). The first run of
    32 lowercase hex digits is the key; an id without one belongs to no record."""
    found = _KEY.search(engine_id)
    return found.group(0) if found else None


def renamed(answer_id: Any, request_id: Any) -> Any:
    """A record's ``answer_id`` as a report's frame keeps it: only where it does not hold the record's own
    ``request_id`` (a router sent the engine an id of its own, and the answer's id is the one way to meet that record
    in the trace); None where it does (``cmpl-<request_id>``: a million records would otherwise hold a million
    redundant strings)."""
    if type(answer_id) is str and type(request_id) is str and request_id in answer_id:
        return None
    return answer_id


def file_name(source: Source, pid: int | None = None, host: str | None = None) -> str:
    """The trace file one process writes: ``engine_steps-<source>-<host>-<pid>.jsonl``."""
    host = socket.gethostname() if host is None else host
    safe_host = re.sub(r"[^A-Za-z0-9_.]", "_", host)[:64] or "host"
    return f"engine_steps-{source}-{safe_host}-{os.getpid() if pid is None else pid}.jsonl"


class StepWriter:
    """Appends one ``StepRecord`` a line, each handed to the OS before ``write`` returns (a killed engine loses
    no finished step). ``failures`` counts records that could not be written; ``write`` never raises."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: BinaryIO | None = open_append(path)
        self.written = 0
        self.failures = 0

    @classmethod
    def from_env(cls, source: Source, environ: dict[str, str] | None = None) -> StepWriter | None:
        """A writer into the folder ``ENV`` names, or None where it names none. The folder is made if missing;
        an unusable folder raises ``OSError`` or ``RunFolderError`` here, at start, not at a step."""
        folder = (os.environ if environ is None else environ).get(ENV, "")
        if not folder:
            return None
        path = Path(folder)
        path.mkdir(parents=True, exist_ok=True)
        return cls(path / file_name(source))

    def write(self, record: StepRecord) -> bool:
        if self._fh is None:
            self.failures += 1
            return False
        try:
            self._fh.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
        except (OSError, TypeError, ValueError):
            self.failures += 1
            return False
        self.written += 1
        return True

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
