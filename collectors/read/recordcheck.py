"""Which decoded canary records the columns can hold, and the schema check every reader makes first.

Why apart: both column builders (``collectors.read.columns``, ``collectors.read.fastcolumns``) and the
columns-file reader (``collectors.read.sidecar``) must skip the same records for the same reason, in the
same words; the rules live here once. A record whose value no column can hold (``record_problem``: token
ids that are not a list of integers 0 or more, a canary id that is not a string, a level that is not a
count, ...) is named with its field, what it holds and what was expected; ``check_schema`` raises
``RunFolderError`` for an unknown schema or a missing required field. Pure: must not read files, print,
or import anything under ``loadgen`` but the record and errors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from loadgen.core.errors import RunFolderError
from loadgen.core.record import SCHEMA, CanaryRecord

_REQUIRED = frozenset(
    f.name
    for f in dataclasses.fields(CanaryRecord)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)

_INT64_MAX = 2**63 - 1
_INTS = frozenset((int,))
_STRS = frozenset((str,))


def _ids_ok(v: Any) -> bool:
    return v is None or (
        type(v) is list and (not v or (set(map(type, v)) <= _INTS and min(v) >= 0 and max(v) <= _INT64_MAX))
    )


def _strings_ok(v: Any) -> bool:
    return v is None or (type(v) is list and set(map(type, v)) <= _STRS)


def _count_ok(v: Any) -> bool:
    return v is None or (type(v) is int and 0 <= v <= _INT64_MAX)


Check = tuple[Callable[[Any], bool], str]
# the sequences first, then the scalars: both builders check in this order, so they name the same field
SEQUENCE_CHECKS: dict[str, Check] = {
    "token_ids": (_ids_ok, "null or a list of token ids (integers 0 or more)"),
    "tokens": (_strings_ok, "null or a list of strings"),
}
SCALAR_CHECKS: dict[str, Check] = {
    "canary_id": (lambda v: type(v) is str, "a string"),
    "level": (_count_ok, "null or an integer 0 or more"),
    "inflight_at_send": (_count_ok, "null or an integer 0 or more"),
    "text": (lambda v: v is None or type(v) is str, "null or a string"),
}


def shown(value: Any, limit: int = 40) -> str:
    """``value`` as JSON, cut to about ``limit`` characters: what a message quotes of a field."""
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def field_problem(name: str, value: Any, check: Check) -> str | None:
    ok, expected = check
    return None if ok(value) else f"{name} is {shown(value)}, expected {expected}"


def record_problem(raw: Mapping[str, Any], checks: Mapping[str, Check] | None = None) -> str | None:
    """Why a decoded canary record cannot become a row of the columns (the field, what it holds and what
    was expected), or None. Only the keys present are checked; by default every field of
    ``SEQUENCE_CHECKS`` and ``SCALAR_CHECKS``. The other fields have rules of their own: a logprob, an
    alternative or a time that is no usable number becomes NaN and is counted (``unusable_numbers``); a
    request, usage or batch-size list of another shape counts as absent."""
    for name, check in (checks if checks is not None else _ALL_CHECKS).items():
        if name in raw and (problem := field_problem(name, raw[name], check)):
            return problem
    return None


_ALL_CHECKS = {**SEQUENCE_CHECKS, **SCALAR_CHECKS}


def check_schema(raw: Mapping[str, Any], *, where: str) -> None:
    """A ``RunFolderError`` for a record of an unknown schema or without a required field."""
    if raw.get("schema") != SCHEMA:
        raise RunFolderError(
            f"{where}: canary record schema {shown(raw.get('schema'))} is not supported (expected {SCHEMA})"
        )
    missing = _REQUIRED - raw.keys()
    if missing:
        raise RunFolderError(f"{where}: canary record lacks required field(s) {sorted(missing)}")
