"""Decoded JSON from a server made fit to keep: finite numbers, valid Unicode, 64-bit integers, bounded depth.

Why: Python's ``json`` takes what a server sends and orjson, which writes ``manifest.json``, refuses part of
it: ``Infinity`` and ``NaN`` parse as floats (and ``int(inf)`` raises), ``"\\ud800"`` parses as a lone
surrogate that is not UTF-8, an integer of 100 digits parses whole, and a list nested 300 deep parses but
is too deep to write. What the probe keeps of a server's answers (``/v1/models``, ``/version``, the settings
routes) goes through ``normalised`` once, where it is decoded: a number that cannot be kept becomes null, a
lone surrogate U+FFFD, a subtree deeper than ``MAX_DEPTH`` a short string saying so, and ``changes`` counts
each kind, for the one notice that says what was changed. Pure; no I/O.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

MAX_DEPTH = 32  # a real answer nests a handful of levels; the manifest wraps it in a few more
INT_MIN, INT_MAX = -(2**63), 2**64 - 1  # what orjson writes: signed and unsigned 64-bit
DEEPER = f"[nested deeper than {MAX_DEPTH} levels: left out]"
_WORDS = {
    "non_finite": "non-finite number(s) (NaN, Infinity) made null",
    "big_int": "integer(s) beyond 64 bits made null",
    "surrogate": "string(s) with a lone surrogate, not UTF-8, given U+FFFD in its place",
    "deep": f"value(s) nested deeper than {MAX_DEPTH} levels left out",
}


def lone_surrogate(text: str) -> bool:
    """``text`` holds a surrogate code point (which JSON's ``\\ud800`` escapes make): it has no UTF-8 form."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _text(text: str, changes: Counter[str]) -> str:
    if not lone_surrogate(text):
        return text
    changes["surrogate"] += 1
    return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)


def normalised(value: Any, changes: Counter[str], depth: int = 0) -> Any:
    """A copy of decoded JSON ``value`` that orjson writes as it is; each change counted in ``changes``."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if INT_MIN <= value <= INT_MAX:
            return value
        changes["big_int"] += 1
        return None
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        changes["non_finite"] += 1
        return None
    if isinstance(value, str):
        return _text(value, changes)
    if isinstance(value, dict | list | tuple) and depth >= MAX_DEPTH:
        changes["deep"] += 1
        return DEEPER
    if isinstance(value, dict):
        return {_text(str(k), changes): normalised(v, changes, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalised(v, changes, depth + 1) for v in value]
    return _text(str(value), changes)  # not a JSON type: its text


def describe(changes: Counter[str]) -> str:
    """``changes`` in words, e.g. "1 non-finite number(s) (NaN, Infinity) made null"; "" for none."""
    return "; ".join(f"{n} {_WORDS[k]}" for k, n in sorted(changes.items()) if n)
