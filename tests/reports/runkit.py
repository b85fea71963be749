"""Test helpers: canary records and run folders written by hand, in exactly the collectors' layout, and reports
with only the sections a test reads."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, cast

import orjson

from reports.model.report import Report

_counter = itertools.count()


def rec(
    ids: list[int] | None,
    *,
    level: int = 0,
    phase: str = "sweep",
    canary: str = "c0",
    status: str = "ok",
    logprobs: list[float] | None = None,
    tokens: list[str] | None = None,
    text: str | None = None,
    top: list[list[list[Any]]] | None = None,
    sent_at: float | None = None,
    inflight: int | None = None,
    engine_running: float | None = None,
    error_kind: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One canary record as the collectors write it. ``ids=None`` with ``status='error'`` for a failure."""
    n = next(_counter)
    row: dict[str, Any] = {
        "schema": 1,
        "run_id": "run-test",
        "canary_id": canary,
        "request_id": f"r{n:06d}",
        "phase": phase,
        "level": level,
        "inflight_at_send": level if inflight is None else inflight,
        "sent_at": 1_700_000_000.0 + n if sent_at is None else sent_at,
        "status": status,
        "latency_s": 0.5 + level * 0.1 if status == "ok" else None,
        "ttft_s": None,
        "error_kind": error_kind if status != "ok" else None,
        "request": {"prompt": "p", "temperature": 0, "max_tokens": 8, "seed": 0},
        "token_ids": ids,
        "tokens": tokens if tokens is not None else (None if ids is None else [f"t{i}" for i in ids]),
        "logprobs": logprobs if logprobs is not None else (None if ids is None else [-0.5] * len(ids)),
        "top_logprobs": top,
        "text": text if text is not None else (None if ids is None else " ".join(f"t{i}" for i in ids)),
        "finish_reason": "length" if status == "ok" else None,
        "usage": None,
        "engine_running": engine_running,
        "worker": "",
    }
    row.update(extra)
    return row


def manifest(levels: list[int], **over: Any) -> dict[str, Any]:
    m: dict[str, Any] = {
        "schema": 1,
        "tool": {"name": "loadgen", "version": "0.1.0"},
        "run_id": "run-test",
        "scenario_path": "scenarios/test.toml",
        "scenario": {"name": "test"},
        "endpoint": {"base_url": "http://127.0.0.1:1", "kind": "completions", "model": "tiny", "stream": False},
        "server": {"models": None, "version": None},
        "features": {},
        "labels": {"batch_invariant": "0"},
        "levels": levels,
        "canaries_per_level": 4,
        "started": "2025-01-01T00:00:00Z",
        "finished": "2025-01-01T00:10:00Z",
        "status": "finished",
        "host": {},
        "workers": [],
    }
    m.update(over)
    return m


def write_run(
    run_dir: Path,
    records: list[dict[str, Any]],
    *,
    levels: list[int] | None = None,
    torn_tail: bool = False,
    files: int = 1,
    extra: dict[str, list[dict[str, Any]]] | None = None,
    **manifest_over: Any,
) -> Path:
    """Write a run folder; records are dealt round-robin over ``files`` canary files."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lv = levels if levels is not None else sorted({r["level"] for r in records if r["phase"] == "sweep"})
    (run_dir / "manifest.json").write_bytes(orjson.dumps(manifest(lv, **manifest_over)))
    names = ["canaries.jsonl"] + [f"canaries-worker-{i}.jsonl" for i in range(1, files)]
    for i, name in enumerate(names):
        lines = [orjson.dumps(r) + b"\n" for r in records[i :: len(names)]]
        body = b"".join(lines)
        if torn_tail and i == 0:
            body += b'{"schema": 1, "run_id": "run-test", "canary_id": "c0", "tok'
        (run_dir / name).write_bytes(body)
    for name, rows in (extra or {}).items():
        (run_dir / name).write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return run_dir


def partial_report(**sections: Any) -> Report:
    """A report of only ``sections``, for a reader that touches no other (an older report.json lacks some too)."""
    return cast(Report, sections)
