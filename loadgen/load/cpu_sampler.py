"""Samples this load process's CPU use while a run goes, so the report can say when the client was the limit.

Why: one Locust process is one core. Against a fast streaming engine it can need more (256 streamed
users at 200 tokens/s each), and then it, not the engine, sets the level: requests start late,
canaries wait, and the engine runs fewer requests than the level says. ``time.process_time`` (user +
system CPU of every thread of this process) is read every ``SAMPLE_S`` by a greenlet and written with the
stage the process was in (``collectors.client_cpu``), beside the time its thread waited for a core
(``/proc/self/schedstat`` on Linux: on a shared machine a process short of CPU may use less than a core);
``reports.analysis.client_load`` judges the samples.

Runs inside gevent (a Locust process: the local one, or a worker); it imports no Locust and judges
nothing. A process too busy to wake the greenlet on time still gets its interval measured whole: the
wall interval is the one between two reads, however long it came out.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import gevent

from collectors.client_cpu import ClientCpuSample, ClientCpuWriter

SAMPLE_S = 0.5
_SCHEDSTAT = "/proc/self/schedstat"  # on-CPU ns, waiting-on-a-runqueue ns, timeslices (this thread)

Stage = Callable[[], tuple[int | None, str | None]]  # (level, phase) now; (None, None) between stages


def run_wait_s() -> float | None:
    """Seconds this thread has waited, ready, for a core since it started; None where the kernel does not say."""
    try:
        with open(_SCHEDSTAT, "rb") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


class CpuSampler:
    """Writes one ``ClientCpuSample`` per interval until ``stop`` (which writes the last, partial one)."""

    def __init__(self, writer: ClientCpuWriter, *, worker: str, stage: Stage, every_s: float = SAMPLE_S) -> None:
        self.writer = writer
        self.worker = worker
        self.stage = stage
        self.every_s = every_s
        self.pid = os.getpid()
        self._t = time.time()
        self._cpu = time.process_time()
        self._wait = run_wait_s()
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        self._t, self._cpu, self._wait = time.time(), time.process_time(), run_wait_s()
        self._greenlet = gevent.spawn(self._run)

    def _run(self) -> None:
        while True:
            gevent.sleep(self.every_s)
            self.sample()

    def sample(self) -> None:
        """Close the interval since the last sample: its CPU seconds, attributed to the stage now."""
        t, cpu, wait = time.time(), time.process_time(), run_wait_s()
        if t <= self._t:
            return
        level, phase = self.stage()
        waited = None if wait is None or self._wait is None else max(0.0, wait - self._wait)
        cpu_s = max(0.0, cpu - self._cpu)
        self.writer.write(ClientCpuSample(self.worker, self.pid, self._t, t, cpu_s, level, phase, waited))
        self._t, self._cpu, self._wait = t, cpu, wait

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None
        self.sample()
        self.writer.close()
