"""Proposed hot-path fixes, applied by monkeypatching so their effect is measured before anyone edits the tool.

Why: the benchmarks may not edit the load path (others own it); each fix here is the exact change
proposed for the named file, written so a benchmark can run "before" and "after" side by side in
one process or one run. ``apply()`` patches the live modules; ``sitecustomize_dir()`` writes a
``sitecustomize.py`` that applies them inside a Locust child started with ``BENCH_PATCHES=1``.

- F1 ``loadgen/background.py::BackgroundPrompts.next``: draw the words with one ``rng.choices(_WORDS,
  k=n)`` call instead of one ``rng.choice`` per word. Same distribution and still seeded, but a
  different sequence per seed than today's (runs with the old version are not word-identical).
- F2 ``collectors/canary.py::CanaryCollector.on_record``: hand the record itself to the writer
  (orjson serialises slotted dataclasses natively) instead of ``record.to_dict()``, which is
  ``dataclasses.asdict``: a recursive deep copy of every token, logprob and alternative. The bytes
  written are identical (checked by ``hot_paths.py``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from collectors.canary import CanaryCollector
from collectors.record import CanaryRecord
from loadgen import background
from loadgen.background import BackgroundPrompts, BackgroundRequest

_ORIGINAL_NEXT = BackgroundPrompts.next
_ORIGINAL_ON_RECORD = CanaryCollector.on_record


def next_choices(self: BackgroundPrompts) -> BackgroundRequest:
    """F1: ``BackgroundPrompts.next`` with one ``choices`` call."""
    rng = self._rng
    lo, hi = self.spec.prompt_words
    words = " ".join(rng.choices(background._WORDS, k=rng.randint(lo, hi)))
    shared = self.spec.shared_prefix_words > 0 and rng.random() < self.spec.shared_prefix_share
    prompt = f"{self._prefix} {words}" if shared else words
    return BackgroundRequest(prompt, rng.randint(*self.spec.max_tokens), shared)


def on_record_direct(self: CanaryCollector, record: CanaryRecord, **_: Any) -> None:
    """F2: ``CanaryCollector.on_record`` writing the dataclass directly."""
    self.writer.write(record)
    self.counts[(record.canary_id, record.phase, record.level, record.status)] += 1


FIXES = {"F1": "BackgroundPrompts.next: rng.choices", "F2": "CanaryCollector.on_record: no asdict"}


def apply(which: str = "F1,F2") -> None:
    chosen = {w.strip() for w in which.split(",") if w.strip()}
    BackgroundPrompts.next = next_choices if "F1" in chosen else _ORIGINAL_NEXT  # type: ignore[method-assign]
    CanaryCollector.on_record = on_record_direct if "F2" in chosen else _ORIGINAL_ON_RECORD  # type: ignore[method-assign]


def restore() -> None:
    apply("")


_SITECUSTOMIZE = """\
import os, sys
if os.environ.get("BENCH_PATCHES") and any(a.endswith("locustfile.py") for a in sys.argv):
    import locust  # gevent's patching first, as in any Locust process
    sys.path.insert(0, {here!r})
    import patches
    patches.apply(os.environ["BENCH_PATCHES"])
    print("bench patches applied: " + os.environ["BENCH_PATCHES"], file=sys.stderr, flush=True)
"""


def sitecustomize_dir() -> Path:
    """A fresh folder holding a ``sitecustomize.py`` that applies ``BENCH_PATCHES`` in Locust processes."""
    folder = Path(tempfile.mkdtemp(prefix="bench-patches-"))
    (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(here=str(Path(__file__).resolve().parent)))
    return folder
