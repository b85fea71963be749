"""The load processes' own CPU use, per sampling interval: records written during a run, read by the report.

Why: a load process that needs more than one core cannot hold its level, and nothing else in the run
folder would say so (the engine's in-flight count falls, canaries take longer, the report still names
the level). Each user-side Locust process appends ``client_cpu[-<worker>].jsonl``: one ``ClientCpuSample``
per interval, the CPU seconds the process used over it and the stage it was in. ``reports.analysis.client_load``
turns them into the per-level figures and the "generator-bound" notice (docs/design.md, "held").

This module only defines the record, writes it and reads it back; it judges nothing and imports no
Locust or gevent. Reading tolerates torn or foreign lines (skipped), as every run-folder reader does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collectors.jsonl import JsonlWriter, iter_objects

FILE_GLOB = "client_cpu*.jsonl"


@dataclass(frozen=True, slots=True)
class ClientCpuSample:
    """One interval of one load process: ``cpu_s`` CPU seconds (user + system, every thread) over the wall
    interval ``t0``..``t1`` (epoch seconds), while the run was at ``level`` in ``phase`` (None: between
    stages, or draining after the last canary). ``wait_s``: seconds its main thread was ready to run but
    waited for a core (Linux ``schedstat``; None elsewhere): a process that shares its core with others
    is short of CPU without using a whole one."""

    worker: str
    pid: int
    t0: float
    t1: float
    cpu_s: float
    level: int | None
    phase: str | None
    wait_s: float | None = None


def client_cpu_path(run_dir: Path, worker: str) -> Path:
    """This process's file: ``client_cpu.jsonl`` in a one-process run, ``client_cpu-<worker>.jsonl`` on a worker."""
    return run_dir / (f"client_cpu-{worker}.jsonl" if worker else "client_cpu.jsonl")


class ClientCpuWriter:
    """Appends samples; a sample a second or two at most, so each goes to the OS as it is written."""

    def __init__(self, path: Path) -> None:
        self.writer = JsonlWriter(path)

    def write(self, sample: ClientCpuSample) -> None:
        self.writer.write(sample)

    def close(self) -> None:
        self.writer.close()


def _sample(raw: dict[str, Any]) -> ClientCpuSample | None:
    try:
        level, phase, wait = raw.get("level"), raw.get("phase"), raw.get("wait_s")
        sample = ClientCpuSample(
            worker=str(raw["worker"]),
            pid=int(raw["pid"]),
            t0=float(raw["t0"]),
            t1=float(raw["t1"]),
            cpu_s=float(raw["cpu_s"]),
            level=level if type(level) is int else None,
            phase=phase if isinstance(phase, str) else None,
            wait_s=float(wait) if isinstance(wait, int | float) and wait >= 0 else None,
        )
    except (KeyError, TypeError, ValueError):
        return None
    return sample if sample.t1 > sample.t0 and sample.cpu_s >= 0 else None


def read_client_cpu(run_dir: Path) -> list[ClientCpuSample]:
    """Every usable sample of every load process in the run folder; none for a run from before them."""
    samples: list[ClientCpuSample] = []
    for path in sorted(Path(run_dir).glob(FILE_GLOB)):
        skipped: list[int] = []
        for raw in iter_objects(path, skipped):
            if (sample := _sample(raw)) is not None:
                samples.append(sample)
    return samples
