"""The engine's side of the step trace: one ``StepRecord`` per forward step, from the rows its scheduler built.

Why this module exists: whether a canary's numbers moved depends on the kind of step that computed each of its
positions (docs/design.md, "The engine step trace"); both backends' schedulers hand the rows of every forward
step here, before the step runs, and the record goes out in ``loadgen.core.steptrace``'s format. A decode row
computed every token but its last before this step; a prefill row computed its prefix-cache hit (``cached``).
A handed-over KV loaded without a forward pass is no row. A request's first row carries, of its ``computed``, the
tokens found in the engine's own prefix cache (``local``) and those loaded from outside it (``external``: the
offload tier, a handed-over KV); every later row 0; a scheduler that tells no sources writes neither. It never
schedules, and never raises into a step: the writer counts its failures.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
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


def step_record(
    step: int,
    decoding: Sequence[_Sequence],
    prefills: Sequence[tuple[_Sequence, int]],
    sources: Mapping[str, tuple[int, int]] | None = None,
) -> StepRecord:
    """The record of one step: ``decoding`` sequences decode one token each, ``prefills`` (each with the prompt
    tokens it had before the step, its prefix-cache hit) compute the rest of their prompt. ``sources``: the
    (local, external) tokens of each request whose first row this is; None: the scheduler tells none."""
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
    local = external = None
    if sources is not None:
        local = [sources.get(i, (0, 0))[0] for i in ids]
        external = [sources.get(i, (0, 0))[1] for i in ids]
    return StepRecord(
        step, time.time(), ids, scheduled, computed, prompt, source="embedded", local=local, external=external
    )
