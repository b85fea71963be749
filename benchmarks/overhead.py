"""Client-side overhead at 256 requests in flight: time spent in the tool per canary, not on the wire.

Why: the engine's batch is what the level says only if the generator adds next to nothing per
request. In one gevent process (Locust imported, a local runner's stats attached) 256 greenlets
each drive a real ``CanaryUser`` (``loadgen/load/users.py``) through ``CanaryUser._send``: body
building, ``loadgen.load.client.send``, dialect parsing, the ``CanaryRecord``, the ``canary_record``
event into the real ``CanaryCollector``/``JsonlWriter`` (every canary recorded), Locust's stats.
Each user's client is wrapped so the time from ``request()`` to the end of ``read()`` is "wire";
overhead = time in ``_send`` minus wire. Outside the wire a greenlet never yields, so that is the
tool's own time for the request. Side by side, alternating, in the same process and against the
same fast server: a bare loop (``request`` + ``read``, nothing else). Target: overhead p50 < 1 ms.

Run: ``python benchmarks/overhead.py [--quick] [--inflight 256] [--seconds 4] [--reps 3]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
import locust
from harness import command_line, cores, fast_server, median, pct, table
from locust.env import Environment
from locust.event import EventHook

from loadgen.core.scenario import parse_scenario
from loadgen.load.client import make_client
from loadgen.load.runstate import Plan, RunState, state_from_plan
from loadgen.load.stages import Ticket
from loadgen.load.users import CanaryUser
from loadgen.runs.prepare import prepare_run

WARMUP_S = 0.5
SCENARIO: dict[str, Any] = {
    "name": "bench-overhead",
    "endpoint": {"kind": "completions"},
    "canaries": [
        {
            "id": "bench",
            "prompt": "The history of the old harbour town begins with",
            "max_tokens": 64,
            "seed": 0,
            "logprobs": True,
            "top_logprobs": 2,
        }
    ],
    "sweep": {"levels": [256], "warmup": 0, "baseline": 0},
}
# stage_index never matches the tracker's, so ``tracker.complete`` leaves the run's stages alone
TICKET = Ticket(stage_index=10**6, phase="sweep", level=256, canary_index=0, seq=0)


@dataclass
class Result:
    name: str
    requests: int = 0
    window_s: float = 0.0
    cpu_s: float = 0.0
    overhead_s: list[float] = field(default_factory=list)


class TimedResponse:
    """Stands in for the client's response: same reads, and notes when the body's last byte was read."""

    __slots__ = ("_resp", "_wire", "status_code")

    def __init__(self, resp: Any, wire: list[float], t0: float) -> None:
        self._resp, self._wire, self.status_code = resp, wire, resp.status_code
        wire.append(-t0)

    def read(self) -> bytes:
        data: bytes = self._resp.read()
        self._wire[-1] += time.perf_counter()
        return data


def timed_client(client: Any, wire: list[float]) -> Any:
    original = client.request

    def request(*args: Any, **kwargs: Any) -> TimedResponse:
        t0 = time.perf_counter()
        return TimedResponse(original(*args, **kwargs), wire, t0)

    client.request = request
    return client


def tool_worker(user: CanaryUser, st: RunState, wire: list[float], done: list[float], stop_at: float) -> None:
    while time.perf_counter() < stop_at:
        t0 = time.perf_counter()
        user._send(st, TICKET, user.http)
        total = time.perf_counter() - t0
        done.append(total - wire[-1])


def bare_worker(client: Any, path: str, body: bytes, done: list[float], stop_at: float) -> None:
    while time.perf_counter() < stop_at:
        resp = client.request("POST", path, body=body)
        resp.read()
        done.append(0.0)


def measure(name: str, workers: list[gevent.Greenlet], done: list[float], seconds: float) -> Result:
    for g in workers:
        g.start()
    gevent.sleep(WARMUP_S)
    t0, c0, n0 = time.perf_counter(), os.times(), len(done)
    gevent.sleep(seconds)
    t1, c1, n1 = time.perf_counter(), os.times(), len(done)
    gevent.joinall(workers, raise_error=True)
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    return Result(name, n1 - n0, t1 - t0, cpu, done[n0:n1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 reps of 2 s")
    p.add_argument("--inflight", type=int, default=256)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    if args.quick:
        args.reps, args.seconds = 2, 2.0
    server_cpu, gen_cpu = cores()
    print(f"command: {command_line()}")
    print(
        f"server on core {server_cpu}, this process on core {gen_cpu}; {args.inflight} in flight; "
        f"{args.reps} reps x {args.seconds:g} s, alternating\n"
    )
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp, fast_server(server_cpu) as (url, _):
        os.sched_setaffinity(0, {gen_cpu})
        scenario = parse_scenario({**SCENARIO, "endpoint": {"kind": "completions", "base_url": url}}, "overhead")
        st = state_from_plan(Plan.of(prepare_run(scenario, source="overhead", out_dir=Path(tmp))[0]), worker="")
        env = Environment(user_classes=[CanaryUser], events=locust.events)
        runner = env.create_local_runner()
        runner.register_message("lg_done", lambda *_, **__: None)  # the coordinator's stage bookkeeping
        ep = st.scenario.endpoint
        bare_body = b'{"model":"bench/fixed","prompt":"x","max_tokens":64,"logprobs":2,"stream":false}'
        for rep in range(args.reps):
            for variant in ("bare", "tool") if rep % 2 == 0 else ("tool", "bare"):
                done: list[float] = []
                stop_at = time.perf_counter() + WARMUP_S + args.seconds
                clients = [
                    make_client(
                        url, connect_timeout_s=ep.connect_timeout_s, read_timeout_s=ep.read_timeout_s, api_key=None
                    )
                    for _ in range(args.inflight)
                ]
                if variant == "bare":
                    workers = [
                        gevent.Greenlet(bare_worker, c, "/v1/completions", bare_body, done, stop_at) for c in clients
                    ]
                else:
                    if not hasattr(env.events, "canary_record"):
                        env.events.canary_record = EventHook()  # type: ignore[attr-defined]
                        st.canaries.register(env.events.canary_record)  # type: ignore[attr-defined]
                    workers = []
                    for c in clients:
                        user = CanaryUser(env)
                        wire: list[float] = [0.0]
                        user.http = timed_client(c, wire)
                        workers.append(gevent.Greenlet(tool_worker, user, st, wire, done, stop_at))
                results.append(measure(variant, workers, done, args.seconds))
                for c in clients:
                    c.close()
        written = st.canaries.writer.written
        st.close()
    rows = []
    bare_rate = median([r.requests / r.cpu_s for r in results if r.name == "bare"])
    for name in ("bare", "tool"):
        mine = [r for r in results if r.name == name]
        per_cpu = median([r.requests / r.cpu_s for r in mine])
        rate = median([r.requests / r.window_s for r in mine])
        over = [x for r in mine for x in r.overhead_s]
        p50 = f"{pct(over, 0.5) * 1e6:,.0f}" if name != "bare" else "-"
        p99 = f"{pct(over, 0.99) * 1e6:,.0f}" if name != "bare" else "-"
        rows.append((name, f"{rate:,.0f}", f"{per_cpu:,.0f}", f"{per_cpu / bare_rate:.2f}x", p50, p99))
    print(
        table(["variant", "req/s", "req/CPU-s", "vs bare", "overhead p50 us", "p99 us"], rows, [12, 10, 12, 10, 18, 10])
    )
    print(f"\n{written} canary records written (every tool request recorded); medians over {args.reps} reps")


if __name__ == "__main__":
    main()
