"""A dict written as TOML text: the standard library reads TOML (``tomllib``) but does not write it.

Used for a reproducer's ``replay.toml``. Writes the subset a scenario uses (scalars, lists, inline and
nested tables, top-level arrays of tables), strings escaped so that ``tomllib`` reads the same value
back. Knows nothing of scenarios; a value TOML cannot hold raises ``TypeError`` (a bug in the caller).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np


def toml_text(data: dict[str, Any]) -> str:
    """``data`` as TOML (the subset a scenario uses: scalars, lists, tables, arrays of tables)."""
    out: list[str] = []
    _table(out, data, [])
    return "\n".join(out).strip() + "\n"


def _table(out: list[str], data: dict[str, Any], path: list[str]) -> None:
    subs: list[tuple[str, Any, bool]] = []
    for k, v in data.items():
        if isinstance(v, dict):
            subs.append((k, v, False))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v) and not path:
            subs.append((k, v, True))
        else:
            out.append(f"{_key(k)} = {_value(v)}")
    for k, v, many in subs:
        here = [*path, _key(k)]
        for item in v if many else [v]:
            out.append("")
            out.append(f"[[{'.'.join(here)}]]" if many else f"[{'.'.join(here)}]")
            _table(out, item, here)


def _key(k: str) -> str:
    return k if k and all((c.isalnum() and c.isascii()) or c in "_-" for c in k) else _string(k)


def _string(s: str) -> str:
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if np.isfinite(v) else ("nan" if np.isnan(v) else "inf" if v > 0 else "-inf")
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items() if x is not None) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")
