"""SIGINT in a Locust process becomes a KeyboardInterrupt in its main greenlet, never inside another greenlet.

Why: Python raises KeyboardInterrupt wherever the main thread happens to be. Under gevent that can be in the
middle of a link callback; once it landed in ``gevent.pool.Group._discard``, a finished greenlet stayed in
Locust's runner group, and ``Runner.quit`` (``Group.kill(block=True)``) then waited for it forever: a
``loadgen run --ui`` that never exited after SIGTERM (seen in CI, its stacks dumped by ``kill -USR1``). Taken
by gevent's signal watcher instead, the signal is handled in a greenlet of its own, between callbacks, which
throws the KeyboardInterrupt into the main greenlet: Locust's own graceful path (``main`` catches it around
its wait, saves its HTML file and shuts down) as before, at a safe point. Nothing else changes: a second
Ctrl-C does the same, and a Python handler installed later (Locust's ``--processes`` parent) replaces this.
"""

from __future__ import annotations

import signal

import gevent


def interrupt_main_safely() -> None:
    """Call from the main greenlet (the locustfile is imported there, by Locust's ``main``)."""
    main = gevent.getcurrent()

    def interrupt() -> None:
        if not main.dead:
            main.throw(KeyboardInterrupt)

    gevent.signal_handler(signal.SIGINT, interrupt)
