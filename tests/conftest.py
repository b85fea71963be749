"""Process-wide settings of the test run: how many workers, one BLAS thread, no gevent monkey-patching.

``-n auto`` (pyproject.toml's addopts) starts two pytest-xdist workers per core, at most 8: about half
of an end-to-end test's time is spent waiting, not computing (test servers stream at a set token rate,
Locust's shape ticks once a second, a level settles), so one worker per core leaves the cores idle
about half the time (on 2 cores the suite took 10.7 min with 2 workers and 7.1 with 4 on the same
loaded machine). Past 8 the modules of a minute or more bound the suite. ``PYTEST_XDIST_AUTO_NUM_WORKERS``
or ``-n N`` overrides; ``-n 0`` runs in one process.

NumPy's OpenBLAS runs one thread per core unless told otherwise. The engine runs its matrix products
on one (``loadgen/engine/__main__.py``); tests that drive a scheduler in-process would use every core
for each small product, and with pytest-xdist's workers side by side those threads fight over the
same cores (the 64-batch test of ``test_engine_model.py``: 7 s instead of 3 alone, 20 to 90 s beside
another worker). So the variable is set here, before anything
imports NumPy, and every process a test starts inherits it.

The test process never monkey-patches the standard library with gevent.

Importing any ``locust`` module runs ``locust/__init__.py``, which calls ``gevent.monkey.patch_all()``
unless ``LOCUST_SKIP_MONKEY_PATCH`` is set. In the pytest process that would turn the threads of every
test collected after the first such import into greenlets (so a test's behaviour would depend on
collection order), and it deadlocks a pytest-xdist worker, whose message loop runs on a real thread
that the patched locks no longer wake. The few tests that use Locust's classes in-process
(``EventHook``, ``RequestStats``) need no patching; every real Locust run is a subprocess, which
patches as in production. So ``locust`` is imported here once, unpatched, before any test module,
and the variable is removed again so that those subprocesses do not inherit it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

_SKIP = "LOCUST_SKIP_MONKEY_PATCH"
_before = os.environ.get(_SKIP)
os.environ[_SKIP] = "1"
try:
    import locust  # noqa: F401  (imported for its side effect: the package is loaded without patching)
finally:
    if _before is None:
        del os.environ[_SKIP]
    else:
        os.environ[_SKIP] = _before


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Two workers per core, at most 8 (see the module docstring)."""
    if env := os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(env)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(2 * cores, 8)


def _patched() -> bool:
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and bool(monkey.is_module_patched("threading"))


@pytest.fixture(autouse=True)
def _no_gevent_patching() -> Iterator[None]:
    """Fails the test that monkey-patched this process (run Locust or ``patch_all`` in a subprocess)."""
    yield
    assert not _patched(), "this test monkey-patched the pytest process with gevent; do that in a subprocess"
