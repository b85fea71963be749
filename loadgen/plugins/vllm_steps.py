"""vLLM general plugin: one engine step trace line per scheduled step, written inside vLLM's scheduling process.

Why this module exists: why a canary's answer moved is decided by what each engine step held (docs/design.md,
"The engine step trace"), and only vLLM's scheduler knows that. vLLM calls every entry point of the group
``vllm.general_plugins`` in each of its processes; ``register`` wraps ``Scheduler.schedule`` (its asynchronous
subclass inherits it), and after the original returns turns its ``SchedulerOutput`` and the scheduler's
request table into one ``StepRecord`` (``loadgen.core.steptrace``).

What it must not do: cost the engine more than building a few lists and one write per step; change what
``schedule`` returns; raise into a step (its first error is logged once and the plugin is off for the rest of
the process); write anything unless ``LOADGEN_STEP_TRACE`` names a folder; make a file in a process that never
schedules (the writer opens on the first step). It imports vLLM only inside ``register``, and nothing of this
project but ``loadgen.core.steptrace``.

The shapes it reads, checked against vLLM's source (``vllm/v1/core/sched/output.py`` and ``scheduler.py``):
``num_scheduled_tokens`` (request id -> tokens this step); ``scheduled_new_reqs[i].req_id`` and
``.num_computed_tokens`` (before this step, prefix-cache hits included); ``scheduled_cached_reqs.req_ids`` with
the parallel ``.num_computed_tokens`` (before this step: ``schedule`` advances the request's own count only
afterwards, in ``_update_after_schedule``); ``preempted_req_ids`` (a set, absent or None in older versions);
``Scheduler.requests[req_id].num_prompt_tokens``; and for ``local``/``external``, ``.prefill_stats`` (set at the
request's first scheduling, with ``num_local_cached_tokens`` and ``num_external_cached_tokens``; None once taken;
absent before vLLM had it) and ``.num_preemptions``: a row of ``scheduled_new_reqs`` whose ``prefill_stats`` is
not None and whose ``num_preemptions`` is 0 is the request's first, and carries them; every other row 0. A vLLM
whose requests have no ``prefill_stats`` at all writes neither list (unknown).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from loadgen.core.steptrace import ENV, StepRecord, StepWriter, file_name

ENTRY_POINT: Final = "loadgen_steps"  # the name in ``vllm.general_plugins`` (and in ``VLLM_PLUGINS``, where set)
SCHEDULER_MODULE: Final = "vllm.v1.core.sched.scheduler"
MARK: Final = "__loadgen_step_trace__"  # on the wrapper: a second ``register`` in the same process wraps nothing

# Under vLLM's own logger, so its handler and format print the one line this plugin may ever log.
log = logging.getLogger("vllm.loadgen_steps")


class NewRequest(Protocol):
    @property
    def req_id(self) -> str: ...
    @property
    def num_computed_tokens(self) -> int: ...


class CachedRequests(Protocol):
    @property
    def req_ids(self) -> Sequence[str]: ...
    @property
    def num_computed_tokens(self) -> Sequence[int]: ...


class SchedulerOutput(Protocol):
    """The part of vLLM's ``SchedulerOutput`` this plugin reads."""

    @property
    def scheduled_new_reqs(self) -> Sequence[NewRequest]: ...
    @property
    def scheduled_cached_reqs(self) -> CachedRequests: ...
    @property
    def num_scheduled_tokens(self) -> Mapping[str, int]: ...


class Request(Protocol):
    @property
    def num_prompt_tokens(self) -> int: ...


class PrefillStats(Protocol):
    @property
    def num_local_cached_tokens(self) -> int: ...
    @property
    def num_external_cached_tokens(self) -> int: ...


def _sources(ids: list[str], new: int, requests: Mapping[str, Request]) -> tuple[list[int], list[int]] | None:
    """``local`` and ``external`` of the step's rows (the first ``new`` are ``scheduled_new_reqs``); None where
    this vLLM's requests have no ``prefill_stats`` (it tells no sources)."""
    if ids and not hasattr(requests[ids[0]], "prefill_stats"):
        return None
    local: list[int] = []
    external: list[int] = []
    for row, req_id in enumerate(ids):
        req = requests[req_id]
        stats: PrefillStats | None = getattr(req, "prefill_stats", None) if row < new else None
        if stats is None or getattr(req, "num_preemptions", 0) != 0:
            local.append(0)
            external.append(0)
            continue
        local.append(stats.num_local_cached_tokens)
        external.append(stats.num_external_cached_tokens)
    return local, external


def step_record(step: int, t: float, output: SchedulerOutput, requests: Mapping[str, Request]) -> StepRecord | None:
    """The trace line of one step, or None for a step that scheduled nothing and preempted nothing.

    Rows are the new requests, then the cached ones (running and resumed), each once. Raises ``ValueError``
    where the output's lists do not cover ``num_scheduled_tokens`` exactly (a vLLM of another shape), and
    ``KeyError`` where a scheduled id is missing from either table."""
    counts = output.num_scheduled_tokens
    preempted: Collection[str] = getattr(output, "preempted_req_ids", None) or ()
    if not counts and not preempted:
        return None
    ids: list[str] = []
    computed: list[int] = []
    for new in output.scheduled_new_reqs:
        ids.append(new.req_id)
        computed.append(new.num_computed_tokens)
    cached = output.scheduled_cached_reqs
    ids.extend(cached.req_ids)
    computed.extend(cached.num_computed_tokens)
    if len(ids) != len(counts) or len(computed) != len(ids):
        raise ValueError(
            f"a step of {len(counts)} scheduled requests lists {len(ids)} ids and {len(computed)} computed counts"
        )
    sources = _sources(ids, len(output.scheduled_new_reqs), requests)
    return StepRecord(
        step=step,
        t=t,
        ids=ids,
        scheduled=[counts[i] for i in ids],
        computed=computed,
        prompt=[requests[i].num_prompt_tokens for i in ids],
        source="vllm",
        preempted=sorted(preempted),
        local=None if sources is None else sources[0],
        external=None if sources is None else sources[1],
    )


class StepTrace:
    """This process's trace: its writer opened on the first step worth a line, off for good after any error."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.on = True
        self.writer: StepWriter | None = None
        self.steps = 0

    def after_schedule(self, scheduler: Any, output: SchedulerOutput) -> None:
        """Write the step ``schedule`` just returned; raises on anything unexpected (the caller turns it off)."""
        record = step_record(self.steps, time.time(), output, scheduler.requests)
        if record is None:
            return
        if self.writer is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.writer = StepWriter(self.folder / file_name("vllm"))
        if not self.writer.write(record):
            raise OSError(f"could not write a step to {self.writer.path}")
        self.steps += 1

    def turn_off(self, error: BaseException) -> None:
        self.on = False
        log.warning(
            "loadgen step trace: off for the rest of this process (%d steps written to %s) after %s: %s",
            self.steps,
            self.writer.path if self.writer else self.folder,
            type(error).__name__,
            error,
        )
        if self.writer is not None:
            self.writer.close()


Schedule = Callable[..., Any]


def traced(original: Schedule, trace: StepTrace) -> Schedule:
    """``original`` followed by the trace; whatever the trace does, ``original``'s output is returned as it is."""

    def schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
        output = original(self, *args, **kwargs)
        if trace.on:
            try:
                trace.after_schedule(self, output)
            except Exception as error:  # noqa: BLE001 - the trace must never break a step: it turns itself off
                trace.turn_off(error)
        return output

    functools.update_wrapper(schedule, original)  # vLLM's name and docstring; ``__wrapped__`` is the original
    setattr(schedule, MARK, trace)
    return schedule


def register() -> None:
    """vLLM's entry point: wrap ``Scheduler.schedule`` once per process, where ``LOADGEN_STEP_TRACE`` is set.

    Never raises: vLLM calls plugins outside any guard, so a vLLM this plugin cannot wrap starts untraced,
    with one log line saying why."""
    folder = os.environ.get(ENV, "")
    if not folder:
        return
    try:
        from vllm.v1.core.sched.scheduler import Scheduler

        if getattr(Scheduler.schedule, MARK, None) is not None:
            return
        Scheduler.schedule = traced(Scheduler.schedule, StepTrace(Path(folder)))
    except Exception as error:  # noqa: BLE001 - a plugin that cannot wrap must not stop vLLM from starting
        log.warning(
            "loadgen step trace: not wrapping %s.Scheduler.schedule: %s: %s",
            SCHEDULER_MODULE,
            type(error).__name__,
            error,
        )
