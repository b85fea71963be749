"""Shipped scenario files (TOML). Data only: ``path_of`` finds one by name, ``unknown_name`` says which were meant."""

from __future__ import annotations

import difflib
from pathlib import Path

HERE = Path(__file__).resolve().parent


def path_of(name: str) -> Path:
    """``quickstart`` -> the shipped ``quickstart.toml``; any other string is taken as a path."""
    candidate = HERE / f"{name}.toml"
    return candidate if "/" not in name and candidate.exists() else Path(name)


def names() -> list[str]:
    return sorted(p.stem for p in HERE.glob("*.toml"))


def unknown_name(name: str) -> str | None:
    """For a bare name that is neither a file nor a shipped scenario (``quikstart``): the shipped names, with the
    nearest first as "did you mean"; None for a path (it has a folder or a ``.toml`` suffix)."""
    if "/" in name or name.endswith(".toml"):
        return None
    shipped = names()
    close = difflib.get_close_matches(name, shipped, n=1, cutoff=0.6)
    mean = f"did you mean {close[0]}? " if close else ""
    return f"not a file, nor a shipped scenario ({mean}shipped: {', '.join(shipped)})"
