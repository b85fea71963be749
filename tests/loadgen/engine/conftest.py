"""Fixtures of the engine tests: drive a Scheduler directly (``drive``), start a server (``engine_process``).

Helpers are exposed through fixtures because the suite runs with ``--import-mode=importlib``,
where test modules cannot import a sibling module by name.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from loadgen.engine.runner import EngineOptions, build_scheduler
from loadgen.engine.sampling import SamplingParams
from loadgen.engine.scheduler import EngineRequest, Scheduler, TokenEvent

WORDS = [
    "the",
    "old",
    "man",
    "sea",
    "river",
    "house",
    "light",
    "story",
    "night",
    "town",
    "water",
    "boat",
    "song",
    "morning",
    "king",
]


@dataclass(frozen=True)
class Completion:
    token_ids: tuple[int, ...]
    logprobs: tuple[float | None, ...]
    tops: tuple[tuple[tuple[int, float], ...], ...]
    cached_tokens: int

    def numerics(self) -> tuple[object, ...]:
        """Everything the model computed (ids, logprobs, top-k); not how much came from the cache."""
        return (self.token_ids, self.logprobs, self.tops)


def _completion(events: list[TokenEvent], cached: int) -> Completion:
    return Completion(
        tuple(e.token_id for e in events), tuple(e.logprob for e in events), tuple(e.top for e in events), cached
    )


def generate(sched: Scheduler, prompt: str, max_tokens: int = 32, logprobs: int | None = 5) -> Completion:
    """One greedy request run to completion on its own."""
    ids = sched.tokenizer.encode(prompt)
    sched.add(EngineRequest("solo", ids, SamplingParams(max_tokens=max_tokens, temperature=0, logprobs=logprobs)))
    events: list[TokenEvent] = []
    cached = 0
    while sched.has_work:
        for d in sched.step():
            events.extend(d.events)
            cached = d.cached_tokens
    return _completion(events, cached)


def generate_in_batch(
    sched: Scheduler, prompt: str, others: int, seed: int, max_tokens: int = 16, bg_tokens: int = 24, bg_words: int = 40
) -> Completion:
    """The prompt sent while ``others`` background requests of varied lengths are in flight."""
    rnd = random.Random(seed)
    for i in range(others):
        text = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(2, bg_words)))
        params = SamplingParams(max_tokens=rnd.randint(1, bg_tokens), temperature=0, ignore_eos=True)
        sched.add(EngineRequest(f"bg{i}", sched.tokenizer.encode(text), params))
        if rnd.random() < 0.3:
            sched.step()
    ids = sched.tokenizer.encode(prompt)
    sched.add(EngineRequest("canary", ids, SamplingParams(max_tokens=max_tokens, temperature=0, logprobs=5)))
    events: list[TokenEvent] = []
    cached = 0
    while sched.has_work:
        for d in sched.step():
            if d.request_id == "canary":
                events.extend(d.events)
                cached = d.cached_tokens
    return _completion(events, cached)


def fresh(**kwargs: object) -> Scheduler:
    return build_scheduler(EngineOptions(**kwargs))  # type: ignore[arg-type]


class Drive:
    """The helpers above, handed to tests by the ``drive`` fixture."""

    fresh = staticmethod(fresh)
    generate = staticmethod(generate)
    generate_in_batch = staticmethod(generate_in_batch)


@pytest.fixture
def drive() -> type[Drive]:
    return Drive


@contextmanager
def _engine_process(*flags: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``python -m loadgen.engine --port 0`` as a real process; yields (base URL, process)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen.engine", "--port", "0", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("READY http://127.0.0.1:"), (line, proc.stderr.read() if proc.stderr else "")
        yield line.split(" ", 1)[1], proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


@pytest.fixture(scope="session")
def engine_process() -> object:
    """A factory: ``with engine_process(*flags) as (url, proc):`` runs a fresh engine process."""
    return _engine_process
