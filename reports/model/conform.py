"""Does a decoded ``report.json`` have the shape ``reports.model.report`` names? The one check, for readers and tests.

Why: ``check`` and ``compare`` read a ``report.json`` given to them, which may be hand-edited or crafted
(``levels: "x"``, a level without ``concurrency``, a canary entry that is a list). Its figures are then
used as the model types them, so a value of another type would end in a traceback deep in a reader.
``problems`` walks the value against the TypedDicts of ``reports.model.report`` (and the ground floor's it
uses) and says where it departs, as ``canaries[0].levels[1].concurrency: required by Level, missing``:
``reports.render.writer.load_report`` refuses such a file naming the first place, and the tests hold what
``build_report`` writes to the model (``strict``: a key the model lacks is a problem too; a reader
ignores it, since a newer report may hold keys this one does not know). Pure; imports only ``typing``.
"""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin

from typing_extensions import get_type_hints, is_typeddict  # typing's and typing_extensions' TypedDicts both

_WORDS = {int: "an integer", str: "a string", bool: "true or false", float: "a number", type(None): "null"}


def _shown(value: Any, limit: int = 40) -> str:
    """What a place holds, in short: an object or a list by its kind, anything else as JSON writes it."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    # by identity: 1 == True and 0 == False, so a lookup keyed by value would show the integer 1 as true
    text = "null" if value is None else "true" if value is True else "false" if value is False else repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _expected(tp: Any) -> str:
    """``tp`` in words: "an integer", "a list", "null or a number", "an object (Level)"."""
    if is_typeddict(tp):
        return f"an object ({tp.__name__})"
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_expected(arm) for arm in args)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is list:
        return "a list"
    if origin is dict:
        return "an object"
    return _WORDS.get(tp, repr(tp))


def problems(value: Any, tp: Any, where: str = "", *, strict: bool = False) -> list[str]:
    """Where ``value`` (decoded JSON) departs from the type ``tp`` of ``reports.model.report``; empty when it conforms.
    ``where`` prefixes each place (``canaries[0].levels``); ``strict``: keys the model lacks are problems too."""
    if tp is Any or tp is object:
        return []
    if is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{where or 'the document'}: {_shown(value)}, expected {_expected(tp)}"]
        hints = get_type_hints(tp)
        dot = f"{where}." if where else ""
        out = [f"{dot}{k}: not in {tp.__name__}" for k in value if k not in hints] if strict else []
        out += [f"{dot}{k}: required by {tp.__name__}, missing" for k in tp.__required_keys__ if k not in value]
        for k, v in value.items():
            if k in hints:
                out += problems(v, hints[k], f"{dot}{k}", strict=strict)
        return out
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        tried = [problems(value, arm, where, strict=strict) for arm in args]
        if any(not t for t in tried):
            return []
        deeper = [t for t, arm in zip(tried, args, strict=True) if _same_kind(value, arm)]
        return min(deeper, key=len) if deeper else [f"{where}: {_shown(value)}, expected {_expected(tp)}"]
    if origin is Literal:
        ok = any(type(value) is type(a) and value == a for a in args)
        return [] if ok else [f"{where}: {_shown(value)}, expected {_expected(tp)}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {_shown(value)}, expected a list"]
        return [e for i, item in enumerate(value) for e in problems(item, args[0], f"{where}[{i}]", strict=strict)]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {_shown(value)}, expected an object"]
        return [e for k, v in value.items() for e in problems(v, args[1], f"{where}.{k}", strict=strict)]
    if tp is type(None):
        return [] if value is None else [f"{where}: {_shown(value)}, expected null"]
    if tp is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return [] if ok else [f"{where}: {_shown(value)}, expected a number"]
    if tp in (int, str, bool):
        ok = isinstance(value, tp) and (tp is bool or not isinstance(value, bool))
        return [] if ok else [f"{where}: {_shown(value)}, expected {_expected(tp)}"]
    raise TypeError(f"{where}: reports.model.conform does not know the type {tp!r}")


def _same_kind(value: Any, tp: Any) -> bool:
    """``value`` is of the JSON kind ``tp`` names (an object for a TypedDict, a list for a list): its own
    problems, deeper down, say more than "expected null or an object"."""
    origin = get_origin(tp)
    if isinstance(value, dict):
        return is_typeddict(tp) or origin is dict
    return isinstance(value, list) and origin is list
