"""The practical limit: a bare gevent + geventhttpclient loop sending the tool's requests, recording nothing.

Why: "is the generator the bottleneck?" needs a reference for what one core can do at all with
the same client library, the same request bodies and the same server. This loop keeps ``--users``
requests in flight, each greenlet on its own one-connection client (as each Locust user has),
posts pre-serialised bodies and reads the whole answer, and does nothing else: no parsing, no
records, no stats. It prints one JSON object (requests, window, CPU seconds) for the caller.

Run: ``python benchmarks/bare_loop.py --url URL --bodies FILE --users 64 --seconds 8``
(FILE: one JSON body per line, cycled). Not a test; used by ``generator_ceiling.py``.
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
from geventhttpclient import HTTPClient  # noqa: E402

WARMUP_S = 1.0


def worker(url: str, path: str, bodies: list[bytes], start: int, done: list[float], stop_at: float) -> None:
    client = HTTPClient.from_url(
        url, concurrency=1, headers={"Content-Type": "application/json", "Accept": "application/json"}
    )
    i = start
    try:
        while time.perf_counter() < stop_at:
            resp = client.request("POST", path, body=bodies[i % len(bodies)])
            resp.read()
            done.append(time.perf_counter())
            i += 1
    finally:
        client.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--bodies", type=Path, required=True)
    p.add_argument("--users", type=int, default=64)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--path", default="/v1/completions")
    args = p.parse_args()
    bodies = [line for line in args.bodies.read_bytes().splitlines() if line]
    done: list[float] = []
    t_start = time.perf_counter()
    stop_at = t_start + WARMUP_S + args.seconds
    greenlets = [gevent.spawn(worker, args.url, args.path, bodies, i * 7, done, stop_at) for i in range(args.users)]
    gevent.sleep(WARMUP_S)
    t0, e0, cpu0, n0 = time.perf_counter(), time.time(), os.times(), len(done)
    gevent.sleep(args.seconds)
    t1, e1, cpu1, n1 = time.perf_counter(), time.time(), os.times(), len(done)
    gevent.joinall(greenlets, raise_error=True)
    cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    summary = {"requests": n1 - n0, "window_s": t1 - t0, "cpu_s": cpu_s, "epoch": [e0, e1], "total": len(done)}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
