"""The SCENARIO argument of ``run``, ``matrix``, ``coldboot`` and ``onset``: a file, or a shipped scenario's name.

Why apart: four commands take it, and a misspelled name (``quikstart``) must be refused the same way in each,
with the shipped names and the nearest one ("did you mean"), before any engine starts, rather than as a file
that cannot be read. Resolves a name and refuses an unknown one; reads no file and prints nothing.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from loadgen.core.errors import ScenarioError
from scenarios import names, path_of


def scenario_path(name: str) -> Path:
    """The shipped scenario ``name``, or the file ``name``; a bare name that is neither (no folder, no ``.toml``)
    raises ``ScenarioError`` with the shipped names, the nearest first as "did you mean"."""
    path = path_of(name)
    if path.exists() or "/" in name or name.endswith(".toml"):
        return path  # a path: loading it says what is wrong with it
    shipped = names()
    close = difflib.get_close_matches(name, shipped, n=1, cutoff=0.6)
    mean = f"did you mean {close[0]}? " if close else ""
    raise ScenarioError(f"{name}: not a file, nor a shipped scenario ({mean}shipped: {', '.join(shipped)})")
