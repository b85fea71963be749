"""How a burst reached SGLang's scheduler: from SGLang's own request log, per group of requests arriving together.

Why: a burst sent as separate requests and one sent as a prompt list (``sweep.burst_send``) are both "at once"
for the client, but not for the engine: SGLang's tokenizer manager passes separate requests on one at a time,
and a copy that arrives after another has been prefilled finds its prefix in the radix cache. This reads the log
SGLang writes with ``--log-requests --log-requests-format json`` (each finished request's ``meta_info``:
``request_received_ts``, ``cached_tokens``, ``prompt_tokens``; each received request's ``rid``, a list for a
call with several prompts) and prints, for every group of at least ``--min-size`` requests with
``--max-new-tokens`` received less than ``--gap-ms`` apart: how many HTTP calls carried it, how far apart its
requests were received, and how many found cached tokens. Stdlib only.

usage: python3 benchmarks/sglang/arrivals.py REQLOG [--max-new-tokens 100] [--gap-ms 300] [--min-size 4]
       [--lengths 1,232,961,1911]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Arrival:
    rid: str
    call: str  # the first rid of the HTTP call that carried it: one call, one value
    received_ts: float
    prompt_tokens: int
    cached_tokens: int


@dataclass(frozen=True)
class Group:
    arrivals: list[Arrival]

    @property
    def calls(self) -> int:
        return len({a.call for a in self.arrivals})

    @property
    def spread_ms(self) -> float:
        ts = [a.received_ts for a in self.arrivals]
        return (max(ts) - min(ts)) * 1000.0

    @property
    def cached(self) -> int:
        return sum(1 for a in self.arrivals if a.cached_tokens > 0)


def events(lines: Iterable[str]) -> Iterator[dict[str, object]]:
    """The JSON events of a log whose lines may carry a ``[timestamp] `` prefix; other lines are skipped."""
    for line in lines:
        start = line.find("{")
        if start < 0:
            continue
        try:
            event = json.loads(line[start:])
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            yield event


def arrivals(lines: Iterable[str], max_new_tokens: int) -> list[Arrival]:
    """Every finished request that asked for ``max_new_tokens``, with the call that carried it."""
    call_of: dict[str, str] = {}
    asked: dict[str, int | None] = {}
    out: list[Arrival] = []
    for event in events(lines):
        obj = event.get("obj")
        if event.get("event") == "request.received" and isinstance(obj, dict):
            rids = event.get("rid")
            rids = rids if isinstance(rids, list) else [rids]
            params = obj.get("sampling_params")
            params = params if isinstance(params, list) else [params] * len(rids)
            for rid, p in zip(rids, params, strict=False):
                call_of[str(rid)] = str(rids[0])
                asked[str(rid)] = p.get("max_new_tokens") if isinstance(p, dict) else None
        elif event.get("event") == "request.finished":
            out_ = event.get("out")
            meta = out_.get("meta_info") if isinstance(out_, dict) else None
            rid = str(event.get("rid"))
            if not isinstance(meta, dict) or asked.get(rid) != max_new_tokens:
                continue
            out.append(
                Arrival(
                    rid,
                    call_of.get(rid, rid),
                    float(meta["request_received_ts"]),
                    int(meta.get("prompt_tokens") or 0),
                    int(meta.get("cached_tokens") or 0),
                )
            )
    return sorted(out, key=lambda a: a.received_ts)


def groups(items: list[Arrival], gap_s: float, min_size: int) -> list[Group]:
    """Runs of arrivals each received less than ``gap_s`` after the one before, of at least ``min_size``."""
    runs: list[list[Arrival]] = []
    for a in items:
        if runs and a.received_ts - runs[-1][-1].received_ts < gap_s:
            runs[-1].append(a)
        else:
            runs.append([a])
    return [Group(r) for r in runs if len(r) >= min_size]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reqlog", type=Path)
    ap.add_argument("--max-new-tokens", type=int, default=100)
    ap.add_argument("--gap-ms", type=float, default=300.0)
    ap.add_argument("--min-size", type=int, default=4)
    ap.add_argument("--lengths", help="only groups whose prompt lengths (tokens) are among these: 1,232,961,1911")
    args = ap.parse_args()
    opener = gzip.open if args.reqlog.suffix == ".gz" else open
    with opener(args.reqlog, "rt", encoding="utf-8") as f:
        items = arrivals(f, args.max_new_tokens)
    found = groups(items, args.gap_ms / 1000.0, args.min_size)
    if args.lengths:
        keep = {int(n) for n in args.lengths.split(",")}
        found = [g for g in found if {a.prompt_tokens for a in g.arrivals} <= keep]
    if not found:
        print("no group of requests arrived together")
        return
    t0 = found[0].arrivals[0].received_ts
    print("| t (s) | requests | HTTP calls | received over (ms) | found cached tokens | prompt lengths |")
    print("|---:|---:|---:|---:|---:|---|")
    for g in found:
        lengths = ",".join(str(n) for n in sorted({a.prompt_tokens for a in g.arrivals}))
        print(
            f"| {g.arrivals[0].received_ts - t0:.1f} | {len(g.arrivals)} | {g.calls} | {g.spread_ms:.2f} | "
            f"{g.cached} | {lengths} |"
        )
    for label, chosen in (
        ("one call", [g for g in found if g.calls == 1]),
        ("separate", [g for g in found if g.calls > 1]),
    ):
        if chosen:
            n = sum(len(g.arrivals) for g in chosen)
            print(
                f"{label}: {len(chosen)} groups, {n} requests; received over a median "
                f"{statistics.median(g.spread_ms for g in chosen):.2f} ms; "
                f"{sum(g.cached for g in chosen)} of {n} found cached tokens"
            )


if __name__ == "__main__":
    main()
