"""Plain Locust: ``FastHttpUser`` users posting the tool's background bodies back to back, nothing else.

Why: the other reference for the generator's ceiling (``generator_ceiling.py``). The tool runs on Locust;
this is what Locust itself does per core with the same client library, bodies and server, with none of
the tool's work (no records, no held levels, no hand-overs, no deadlines). Each request's completion
time is kept (a list append) and written, as JSON, to ``BENCH_TIMES_OUT`` when the run stops.

Run by ``generator_ceiling.py``: ``BENCH_BODIES=FILE BENCH_TIMES_OUT=FILE python -m locust -f
benchmarks/plain_locust.py --headless ...`` (FILE: one JSON body per line, cycled).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path
from typing import Any

from locust import FastHttpUser, constant, events, task

BODIES = [line for line in Path(os.environ["BENCH_BODIES"]).read_bytes().splitlines() if line]
HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
DONE: list[float] = []
_next_start = itertools.count(0, 7)


def _done(**_: Any) -> None:
    DONE.append(time.time())


def _write(**_: Any) -> None:
    Path(os.environ["BENCH_TIMES_OUT"]).write_text(json.dumps(DONE))


events.request.add_listener(_done)
events.quitting.add_listener(_write)


class Plain(FastHttpUser):
    wait_time = constant(0)

    def on_start(self) -> None:
        self.i = next(_next_start)

    @task
    def post(self) -> None:
        body = BODIES[self.i % len(BODIES)]
        self.client.post("/v1/completions", data=body, headers=HEADERS)  # type: ignore[arg-type]  # bytes: as documented
        self.i += 1
