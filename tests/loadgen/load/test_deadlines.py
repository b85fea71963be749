"""The per-hub deadline sweep: an armed greenlet past its time gets ``DeadlineHit``, a disarmed one never does."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import gevent
import pytest

from loadgen.load.deadlines import DeadlineHit, deadlines

ROOT = Path(__file__).resolve().parents[3]


def waits(seconds: float, deadline_s: float, ended: list[str]) -> None:
    d = deadlines()
    started = time.perf_counter()
    try:
        d.arm(deadline_s)
        gevent.sleep(seconds)
        ended.append("done")
    except DeadlineHit:
        assert time.perf_counter() - started >= deadline_s  # never early
        ended.append("hit")
    finally:
        d.disarm()


def two_greenlets() -> list[str]:
    ended: list[str] = []
    slow = gevent.spawn(waits, 30.0, 0.1, ended)
    quick = gevent.spawn(waits, 0.01, 0.1, ended)
    gevent.joinall([slow, quick], timeout=10, raise_error=True)
    return ended


def test_only_the_greenlet_past_its_deadline_is_ended() -> None:
    """In a process of its own, as a Locust process is: a test worker's hub carries earlier tests' state (once,
    under two workers on a loaded machine, neither greenlet had run when ``joinall`` gave up)."""
    code = "from tests.loadgen.load.test_deadlines import two_greenlets; print(two_greenlets())"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "['done', 'hit']"


def test_a_disarmed_deadline_never_fires_into_later_work() -> None:
    d = deadlines()
    d.arm(0.05)
    d.disarm()
    gevent.sleep(0.2)  # two sweeps pass with nothing armed: nothing is thrown here


def test_the_main_greenlet_can_be_ended_too() -> None:
    d = deadlines()
    with pytest.raises(DeadlineHit):
        try:
            d.arm(0.05)
            gevent.sleep(30.0)
        finally:
            d.disarm()
    assert deadlines() is d  # one per hub
