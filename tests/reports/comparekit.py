"""Two hand-made runs (batch invariance off and on, background load at levels 2 and 8, the first run
diverging at level 8) compared by ``loadgen compare``: the page the layout tests read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.loadgen.cli.clikit import loadgen
from tests.reports.runkit import rec, write_run


def _bg(level: int, t0: float, tokens: int) -> list[dict[str, Any]]:
    """Three background requests 1 s each, sent 1 s apart: ``tokens`` tokens/s over the level."""
    return [
        {"level": level, "sent_at": t0 + i, "latency_s": 1.0, "status": "ok", "completion_tokens": tokens}
        for i in range(3)
    ]


def _run(tmp_path: Path, name: str, invariant: str, diverge: bool) -> Path:
    records = [rec([1, 2, 3, 4, 5, 6], phase="baseline")]
    for level in (0, 2, 8):
        for n in range(3):
            off = diverge and level == 8 and n > 0
            records.append(rec([1, 2, 3, 4, 9 if off else 5, 6], level=level, sent_at=100.0 + level * 10 + n))
    background = _bg(2, 120.0, 875) + _bg(8, 180.0, 1100 if diverge else 1210)
    return write_run(
        tmp_path / name,
        records,
        labels={"batch_invariant": invariant},
        extra={"background.jsonl": background},
    )


def compare_two(tmp_path: Path) -> Path:
    runs = [_run(tmp_path, "20261130T113217Z-vllm-d3-2x2", "0", True), _run(tmp_path, "20261130T113218Z-b", "1", False)]
    out = tmp_path / "cmp"
    done = loadgen("compare", *map(str, runs), "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    return out
