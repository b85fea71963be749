"""The engine's side of the step trace: one ``StepRecord`` per forward step, from the rows its scheduler built.

Why this module exists: whether a canary's numbers moved depends on the kind of step that computed each of its
positions (docs/design.md, "The engine step trace"); both backends' schedulers hand the rows of every forward
step here, before the step runs, and the record goes out in ``loadgen.core.steptrace``'s format. A decode row
computed every token but its last before this step; a prefill row computed its prefix-cache hit (``cached``).
A handed-over KV loaded without a forward pass is no row. It never schedules, and never raises into a step: the
writer counts its failures.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from loadgen.core.steptrace import ENV, StepRecord, StepWriter


class _Request(Protocol):
    @property
    def request_id(self) -> str: ...

    @property
    def prompt_ids(self) -> list[int]: ...


class _Sequence(Protocol):
    @property
    def req(self) -> _Request: ...

    @property
    def tokens(self) -> list[int]: ...


def open_step_trace(folder: Path | None) -> StepWriter | None:
    """A writer of this process's trace file in ``folder``, or None without one. An unusable folder raises
    (``OSError``, ``RunFolderError``) here, at start."""
    return None if folder is None else StepWriter.from_env("embedded", {ENV: str(folder)})


def step_record(step: int, decoding: Sequence[_Sequence], prefills: Sequence[tuple[_Sequence, int]]) -> StepRecord:
    """The record of one step: ``decoding`` sequences decode one token each, ``prefills`` (each with the prompt
    tokens it had before the step, its prefix-cache hit) compute the rest of their prompt."""
    ids: list[str] = []
    scheduled: list[int] = []
    computed: list[int] = []
    prompt: list[int] = []
    for seq in decoding:
        ids.append(seq.req.request_id)
        scheduled.append(1)
        computed.append(len(seq.tokens) - 1)
        prompt.append(len(seq.req.prompt_ids))
    for seq, cached in prefills:
        n = len(seq.req.prompt_ids)
        ids.append(seq.req.request_id)
        scheduled.append(n - cached)
        computed.append(cached)
        prompt.append(n)
    return StepRecord(step, time.time(), ids, scheduled, computed, prompt, source="embedded")
