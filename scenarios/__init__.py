"""Shipped scenario files (TOML). Data only: ``path_of`` finds one by name."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def path_of(name: str) -> Path:
    """``quickstart`` -> the shipped ``quickstart.toml``; any other string is taken as a path."""
    candidate = HERE / f"{name}.toml"
    return candidate if "/" not in name and candidate.exists() else Path(name)


def names() -> list[str]:
    return sorted(p.stem for p in HERE.glob("*.toml"))
