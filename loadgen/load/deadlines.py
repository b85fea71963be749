"""Total request deadlines kept by one sweep per gevent hub instead of one ``gevent.Timeout`` per request.

Why: a ``gevent.Timeout`` per request (an exception object and a libev timer, created, started and
closed) was among the larger costs of the load path at thousands of requests a second
(``benchmarks/generator_ceiling.py``). Here a request arms its own greenlet's deadline (a dict entry)
and disarms it when it is over; one repeating timer in the hub looks every ``SWEEP_S`` and throws
``DeadlineHit`` into each greenlet still armed past its time, from the hub, as a ``gevent.Timeout``
does. A deadline is therefore hit up to ``SWEEP_S`` late, never early.

A greenlet has one deadline at a time: a request never sends another inside itself. Runs inside
gevent; no I/O, no Locust.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import gevent
from gevent import getcurrent

SWEEP_S = 0.05


class DeadlineHit(BaseException):
    """Thrown into a request's greenlet once its deadline passed. A ``BaseException``, as ``gevent.Timeout``
    is, so that no library's ``except Exception`` takes it for a fault of its own."""


class Deadlines:
    """The armed deadlines of one hub's greenlets, and the timer that sweeps them."""

    def __init__(self, loop: Any, every_s: float = SWEEP_S) -> None:
        self._due: dict[Any, float] = {}  # greenlet -> time.perf_counter() it must be done by
        self._loop = loop
        self._every_s = every_s
        self._timer: Any = None

    def arm(self, seconds: float) -> None:
        """The current greenlet must be done (``disarm``) within ``seconds`` or have ``DeadlineHit`` thrown in."""
        if self._timer is None:
            self._timer = self._loop.timer(self._every_s, self._every_s, ref=False)  # keeps no loop alive
            self._timer.start(self._sweep)
        self._due[getcurrent()] = time.perf_counter() + seconds

    def disarm(self) -> None:
        self._due.pop(getcurrent(), None)

    def _sweep(self) -> None:
        if not self._due:
            return
        now = time.perf_counter()
        for glet in [g for g, by in self._due.items() if by <= now]:
            # each throw runs that greenlet until it waits again: it may have ended others' requests meanwhile
            if self._due.get(glet, now + 1.0) <= now:
                del self._due[glet]
                if not glet.dead:
                    glet.throw(DeadlineHit())


_BY_HUB: weakref.WeakKeyDictionary[Any, Deadlines] = weakref.WeakKeyDictionary()


def deadlines() -> Deadlines:
    """This thread's hub's deadlines (a Locust process has one hub; a test thread may have its own)."""
    hub = gevent.get_hub()
    found = _BY_HUB.get(hub)
    if found is None:
        found = _BY_HUB[hub] = Deadlines(hub.loop)
    return found
