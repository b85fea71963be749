"""Batch-invariance load generator: does an endpoint answer a temperature-0 request the same way when busy?

This package must stay importable without Locust: the load path (``loadgen.load.locustfile`` and the
modules it alone uses) imports Locust, and with it gevent's monkey-patching, on demand.
"""

__version__ = "0.1.0"
