"""Reading engine step traces (``engine_steps*.jsonl``) into flat arrays, one entry per (step, request).

Why this module exists: the report joins every canary to the engine steps that computed it
(docs/design.md, "The engine step trace"); the trace can hold millions of rows, so it is read once into
numpy arrays and every later question is an array operation. The contract (the record's keys, the file
names, the id rule) is ``loadgen.core.steptrace``'s; this module only reads and checks.

A trace comes from an engine, which may be someone else's: a line that is not JSON (a killed engine's torn
tail) is skipped and counted; a line that is JSON but not a step (a list where a number belongs, lists of
different lengths, an unknown schema) is skipped and described in ``TraceFile.malformed``, never trusted and
never fatal. Nothing here decides what a step means: ``reports.analysis.steps`` does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.jsonl import iter_numbered
from loadgen.core.steptrace import FILE_GLOB, SCHEMA, record_key

Ints = npt.NDArray[np.int64]
MAX_DESCRIBED = 5  # malformed lines described per file; the rest are counted
UNKNOWN = -1  # ``StepTable.local``/``external`` of a row whose line did not say (an older trace, SGLang)


@dataclass
class TraceFile:
    name: str
    steps: int = 0
    source: str = ""
    skipped: int = 0  # lines that were not JSON objects (a torn tail) or were malformed
    malformed: dict[int, str] = field(default_factory=dict)  # line -> why, the first few


@dataclass(frozen=True)
class StepTable:
    """Every trace row, flattened. ``step`` numbers steps across all files (unique: file order, then the
    file's own step order), so per-step figures group on it; ``key`` is the record ``request_id`` inside
    the engine's id (``loadgen.core.steptrace.record_key``), "" where the id holds none."""

    files: list[TraceFile]
    step: Ints
    t: npt.NDArray[np.float64]
    key: npt.NDArray[np.object_]
    scheduled: Ints
    computed: Ints
    prompt: Ints
    preempted: frozenset[str]  # record keys the engine preempted at least once
    # of ``computed``: tokens from the engine's own prefix cache / loaded from outside it (an offload tier, a
    # prefill/decode hand-over), set on a request's first row; UNKNOWN where the line had no such key
    local: Ints
    external: Ints
    file: Ints = field(default_factory=lambda: np.zeros(0, np.int64))  # per row, its file's index in ``files``

    @property
    def rows(self) -> int:
        return len(self.step)

    @property
    def steps(self) -> int:
        return sum(f.steps for f in self.files)


def trace_paths(run_dir: Path, extra: Iterable[Path] = ()) -> list[Path]:
    """The run folder's trace files, then the ones brought afterwards (``loadgen report --engine-trace``)."""
    found = sorted(run_dir.glob(FILE_GLOB))
    return found + [Path(p) for p in extra if Path(p) not in found]


def _int_list(obj: dict[str, Any], key: str, n: int) -> list[int] | str:
    value = obj.get(key)
    if not isinstance(value, list) or len(value) != n:
        return f"{key!r} is not a list of {n} entries"
    if not all(type(v) is int and v >= 0 for v in value):
        return f"{key!r} holds something other than non-negative integers"
    return value


def _sources(obj: dict[str, Any], n: int) -> list[list[int]] | str:
    """The optional ``local`` and ``external`` lists; absent or null: UNKNOWN on every row."""
    out: list[list[int]] = []
    for key in ("local", "external"):
        if obj.get(key) is None:
            out.append([UNKNOWN] * n)
            continue
        got = _int_list(obj, key, n)
        if isinstance(got, str):
            return got
        out.append(got)
    return out


def _check(obj: dict[str, Any]) -> tuple[list[str], list[list[int]], float, int, list[str]] | str:
    """The step's rows and figures (scheduled, computed, prompt, local, external), or why the object is not a
    step."""
    if obj.get("schema") != SCHEMA:
        return f"schema {obj.get('schema')!r} (expected {SCHEMA})"
    ids = obj.get("ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return "'ids' is not a list of strings"
    lists = [_int_list(obj, k, len(ids)) for k in ("scheduled", "computed", "prompt")]
    for item in lists:
        if isinstance(item, str):
            return item
    t, step = obj.get("t"), obj.get("step")
    if not isinstance(t, int | float) or isinstance(t, bool) or not np.isfinite(t):
        return "'t' is not a finite number"
    if type(step) is not int:
        return "'step' is not an integer"
    pre = obj.get("preempted", [])
    if not isinstance(pre, list) or not all(isinstance(i, str) for i in pre):
        return "'preempted' is not a list of strings"
    sources = _sources(obj, len(ids))
    if isinstance(sources, str):
        return sources
    return ids, [v for v in lists if not isinstance(v, str)] + sources, float(t), step, pre


def read_traces(paths: Iterable[Path]) -> StepTable:
    """Every step of every file in ``paths``, in file order. A file that cannot be opened (missing, a link, a
    special file) raises ``RunFolderError`` naming it."""
    files: list[TraceFile] = []
    steps: list[Ints] = []
    times: list[npt.NDArray[np.float64]] = []
    keys: list[str] = []
    cols: list[list[int]] = [[], [], [], [], []]
    preempted: set[str] = set()
    file_of: list[Ints] = []
    base = 0
    for path in paths:
        tf = TraceFile(Path(path).name)
        skipped: list[int] = []
        own: list[int] = []
        own_t: list[float] = []
        counts: list[int] = []
        for line, obj in iter_numbered(Path(path), skipped):
            checked = _check(obj)
            if isinstance(checked, str):
                tf.skipped += 1
                if len(tf.malformed) < MAX_DESCRIBED:
                    tf.malformed[line] = checked
                continue
            ids, columns, t, step, pre = checked
            tf.source = tf.source or str(obj.get("source", ""))
            own.append(step)
            own_t.append(t)
            counts.append(len(ids))
            keys.extend(record_key(i) or "" for i in ids)
            for col, values in zip(cols, columns, strict=True):
                col.extend(values)
            preempted.update(k for k in map(record_key, pre) if k)
        tf.skipped += len(skipped)
        tf.steps = len(own)
        files.append(tf)
        if own:
            # steps renumbered densely in the file's own step order (a restarted engine counts from 0 again)
            order = np.argsort(np.asarray(own, np.int64), kind="stable")
            dense = np.empty(len(own), np.int64)
            dense[order] = np.arange(len(own), dtype=np.int64)
            steps.append(np.repeat(dense + base, counts))
            times.append(np.repeat(np.asarray(own_t, np.float64), counts))
            file_of.append(np.full(sum(counts), len(files) - 1, np.int64))
            base += len(own)
    return StepTable(
        files=files,
        step=np.concatenate(steps) if steps else np.zeros(0, np.int64),
        t=np.concatenate(times) if times else np.zeros(0, np.float64),
        key=np.asarray(keys, dtype=object),
        scheduled=np.asarray(cols[0], np.int64),
        computed=np.asarray(cols[1], np.int64),
        prompt=np.asarray(cols[2], np.int64),
        preempted=frozenset(preempted),
        local=np.asarray(cols[3], np.int64),
        external=np.asarray(cols[4], np.int64),
        file=np.concatenate(file_of) if file_of else np.zeros(0, np.int64),
    )
