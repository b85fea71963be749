"""Process-wide settings of the test run: one BLAS thread, and no gevent monkey-patching.

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


def _patched() -> bool:
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and bool(monkey.is_module_patched("threading"))


@pytest.fixture(autouse=True)
def _no_gevent_patching() -> Iterator[None]:
    """Fails the test that monkey-patched this process (run Locust or ``patch_all`` in a subprocess)."""
    yield
    assert not _patched(), "this test monkey-patched the pytest process with gevent; do that in a subprocess"
