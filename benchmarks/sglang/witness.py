"""Which witness of co-residency is right on SGLang: the tool's records against SGLang's own request log.

Why: a level is measured by two witnesses that can disagree, the load side's count of held slots at send
(``held_at_send``: every background stream past its first token and not yet ended, as the client reads it) and
the engine's running gauge (``/metrics``). SGLang's request log (``--log-requests --log-requests-format json``
with ``--enable-metrics``) is a third, independent record: for every request, when SGLang received it, when it
dispatched it and when it finished it (``request_finished_ts``), on the same clock when client and server share a
machine. This script joins the three for one run folder and prints, per sweep canary, how many other requests
SGLang itself was running over the canary's life against what the client's records say, and per level how late
the client saw each background stream end after SGLang had finished it.

usage: python benchmarks/sglang/witness.py RUN_DIR REQUEST_LOG [...]   (log files, plain or .gz, or folders)

Stdlib and numpy only; reads, never writes. Run where the records are (docs/results/sglang-h200/README.md).
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

SAMPLES = 48  # instants over each canary's life at which the others are counted


def _lines(path: Path) -> list[str]:
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as z:
            return z.readlines()
    with open(path, encoding="utf-8") as f:
        return f.readlines()


def finished_requests(paths: list[Path]) -> list[dict[str, Any]]:
    """Every ``request.finished`` entry: its times and what identifies it (max_new_tokens, prompt tokens)."""
    files = [f for p in paths for f in (sorted(p.iterdir()) if p.is_dir() else [p])]
    out = []
    for f in files:
        for line in _lines(f):
            if '"request.finished"' not in line:
                continue
            entry = json.loads(line[line.index("{") :])
            meta = entry["out"]["meta_info"]
            params = entry["obj"].get("sampling_params") or {}
            out.append(
                {
                    "received": meta["request_received_ts"],
                    "running": meta["api_server_dispatch_finish_ts"] + (meta.get("queue_time") or 0.0),
                    "finished": meta["request_finished_ts"],
                    "max_new_tokens": params.get("max_new_tokens"),
                    "prompt_tokens": meta.get("prompt_tokens"),
                    "completion_tokens": meta.get("completion_tokens"),
                }
            )
    return out


def _jsonl(path: Path) -> list[dict[str, Any]]:
    gz = path.with_name(path.name + ".gz")
    return [json.loads(line) for line in _lines(path if path.exists() else gz) if line.strip()]


def _nearest(entries: list[dict[str, Any]], t: float, **match: Any) -> dict[str, Any] | None:
    fits = [e for e in entries if all(e[k] == v for k, v in match.items())]
    best = min(fits, key=lambda e: abs(e["received"] - t), default=None)
    return best if best is not None and abs(best["received"] - t) < 0.25 else None


def main(run_dir: Path, logs: list[Path]) -> None:
    server = finished_requests(logs)
    s_start = np.array([e["running"] for e in server])
    s_end = np.array([e["finished"] for e in server])
    background = [b for b in _jsonl(run_dir / "background.jsonl") if b["status"] == "ok"]
    c_start = np.array([b["sent_at"] + (b["ttft_s"] or 0.0) for b in background])
    c_end = np.array([b["sent_at"] + b["latency_s"] for b in background])
    print(f"{run_dir.name}: {len(server)} requests in SGLang's log, {len(background)} background records")
    print("level  held at send | SGLang's log: others min/med/max | client's records: others min/med/max")
    for c in sorted(_jsonl(run_dir / "canaries.jsonl"), key=lambda r: r["sent_at"]):
        if c["phase"] != "sweep" or c["status"] != "ok":
            continue
        want = c["request"]["sampling_params"]["max_new_tokens"]
        own = _nearest(server, c["sent_at"], max_new_tokens=want)
        if own is None:
            print(f"{c['level']:5d}  canary sent at {c['sent_at']:.3f} not in SGLang's log")
            continue
        ts = np.linspace(own["running"], own["finished"], SAMPLES + 2)[1:-1]
        seen = np.array([((s_start <= t) & (s_end > t)).sum() - 1 for t in ts])  # minus the canary itself
        tc = np.linspace(c["sent_at"], c["sent_at"] + c["latency_s"], SAMPLES + 2)[1:-1]
        client = np.array([((c_start <= t) & (c_end > t)).sum() for t in tc])
        print(
            f"{c['level']:5d}  {c.get('background_held_at_send')!s:>12} | {seen.min():9d} {np.median(seen):6.1f} "
            f"{seen.max():5d}          | {client.min():11d} {np.median(client):6.1f} {client.max():5d}"
        )
    lags: dict[int, list[float]] = defaultdict(list)
    for b in background:
        e = _nearest(server, b["sent_at"], prompt_tokens=b.get("prompt_tokens"))
        if e is not None and b["phase"] == "sweep":
            lags[b["level"]].append(b["sent_at"] + b["latency_s"] - e["finished"])
    print("level  background stream ends seen after SGLang finished them: median / max s (requests)")
    for level, values in sorted(lags.items()):
        print(f"{level:5d}  {np.median(values):6.3f} / {max(values):6.3f} ({len(values)})")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
