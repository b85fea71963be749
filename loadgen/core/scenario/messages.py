"""A pydantic validation failure of a scenario as lines a user can act on: each names the field, and the
command-line option where one set it, with a hint where a common mistake is likely.

Why apart: how a failure reads is its own job, with its own table of options and hints; the schema only
validates. Never echoes an input value: a value may be a secret (a key pasted where a name belongs,
credentials in a URL).
"""

from __future__ import annotations

from pydantic import ValidationError

from loadgen.core.scenario.limits import MAX_LEVEL, MAX_LEVELS

_SECRET_FIELDS = {"api_key", "apikey", "key", "token", "api_token", "authorization", "bearer", "password", "secret"}


def _field_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


# where each command-line override lands: an error there names the option, not only the field
_OPTION_OF = {
    ("endpoint", "base_url"): "--host",
    ("endpoint", "api_key_env"): "--api-key-env",
    ("sweep", "levels"): "--levels",
    ("sweep", "canaries_per_level"): "--canaries-per-level",
    ("sweep", "claim_max_rate"): "--claim-max-rate",
    ("labels",): "--label",
    ("sweep",): "--levels",  # only where nothing longer matches: a burst that now fires as many requests as a level
}


def describe(exc: ValidationError, source: str, *, options: bool = False) -> str:
    """One line per problem; with ``options`` (command-line overrides) each line also names its option."""
    lines = [f"{source}: invalid scenario"]
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        matches = [prefix for prefix in _OPTION_OF if loc[: len(prefix)] == prefix]
        option = _OPTION_OF[max(matches, key=len)] if matches else None
        named = f"{option}: " if options and option else ""
        lines.append(f"  {named}field {_field_path(loc)}: {_message(err['type'], loc, err['msg'])}")
    return "\n".join(lines)


def _message(kind: str, loc: tuple[int | str, ...], msg: str) -> str:
    """Pydantic's message, with a hint where a common mistake is likely; never the input value."""
    msg = msg.removeprefix("Value error, ")
    if kind == "extra_forbidden":
        if str(loc[-1]).lower() in _SECRET_FIELDS:
            return (
                "unknown field; keys are never read from a scenario file: put the key in an environment "
                "variable and name that variable in endpoint.api_key_env"
            )
        return "unknown field (check the spelling)"
    if loc == ("canaries",) and kind == "missing":
        return "required: add at least one [[canaries]] table"
    if loc == ("canaries",) and kind == "list_type":
        return f"{msg}: write each canary as an array of tables, [[canaries]], with double brackets"
    if kind == "string_pattern_mismatch" and loc[-1] == "id":
        return "expected letters, digits, '_', '.' or '-' only (the id names the canary in records and reports)"
    if kind == "less_than_equal" and loc[:2] == ("sweep", "levels"):
        return (
            f"expected at most {MAX_LEVEL} background users: no engine batches more requests than that, "
            "and each user holds two connections open"
        )
    if kind == "less_than_equal" and loc[:2] == ("sweep", "burst"):
        return f"expected at most {MAX_LEVEL} copies at once: no engine batches more requests than that"
    if kind == "too_long" and loc == ("sweep", "levels"):
        return f"expected at most {MAX_LEVELS} levels (each is a stage of the run)"
    if kind == "string_pattern_mismatch" and loc == ("name",):
        return "expected a name usable as a folder name (no '/', '\\', control characters or leading '.')"
    return msg
