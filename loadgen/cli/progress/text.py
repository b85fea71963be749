"""The words of progress output: stage names, durations and the one-line progress summary.

Why: the live terminal view and the plain lines for logs must say the same thing in the same words,
so both take them from here. Pure: snapshots and numbers in, strings out.
"""

from __future__ import annotations

import math

from loadgen.cli.progress.model import Snapshot, StageProgress


def clock(seconds: float | None) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour; ``?`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = max(round(seconds), 0)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def stage_name(stage: StageProgress) -> str:
    if stage.phase == "warmup":
        return "warm-up"
    if stage.phase == "baseline":
        return "baseline"
    return f"burst {stage.level}" if stage.burst else f"level {stage.level}"


def _figure(v: int | None) -> str:
    return "—" if v is None else str(v)


def stage_figures(stage: StageProgress) -> str:
    """``canaries 7/12, unique 3, diverged 6, errors 0`` (and ``held at send 16/16`` where the records say: the
    background slots that held a started request when the stage's last canary went out, of the level; the
    report's ``held throughout`` counts canaries whose level held for their whole life instead)."""
    parts = [f"canaries {stage.done}/{stage.quota}"]
    if stage.phase != "warmup":
        parts.append(f"unique {_figure(stage.unique)}")
    if stage.phase == "sweep":
        parts.append(f"diverged {_figure(stage.diverged)}")
    parts.append(f"errors {stage.errors}")
    if stage.phase == "sweep" and not stage.burst and stage.level and stage.held is not None:
        parts.append(f"held at send {stage.held}/{stage.level}")
    return ", ".join(parts)


BUFFERED = (
    "the background's streams come in one piece (first and last token together, as through a buffering proxy): "
    "levels are held from each request's send, not its first token; send to the engine itself or turn the "
    "proxy's buffering off to see tokens as they come (the report says more)"
)


def totals(snap: Snapshot, elapsed_s: float, through: int | None = None) -> str:
    """``41/65 canaries, 0:31 elapsed, about 0:12 left`` (``at least 0:12 left`` while busier levels are still
    to come than the one the pace was measured at); ``through``: the canaries of the stages up to that index
    only (a stage's "done" line, written when later stages' records came in the same read)."""
    done = snap.done if through is None else sum(s.done for s in snap.stages[: through + 1])
    left = ""
    if snap.current is not None:
        left = f", {'at least' if snap.left_at_least else 'about'} {clock(snap.seconds_left)} left"
    return f"{done}/{snap.quota} canaries, {clock(elapsed_s)} elapsed{left}"


def progress_line(snap: Snapshot, elapsed_s: float) -> str:
    """The whole state in one line: the current stage and its figures, then the totals."""
    if snap.current is None:
        return f"all stages done: {totals(snap, elapsed_s)}, {snap.errors} errors"
    stage = snap.stages[snap.current]
    where = f"{stage_name(stage)} (stage {snap.current + 1} of {len(snap.stages)})"
    return f"{where}: {stage_figures(stage)}; {totals(snap, elapsed_s)}"
