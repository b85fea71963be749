"""Pure parsers for the run options every front end shares: levels, process counts, labels.

Why: values reach the tool from argparse, Locust's web UI form (strings, bypassing ``type=``) and
scenario files; each is converted here, once, with an error that names the option. Pure: no I/O,
no Locust; ``loadgen.load.options`` wires them into Locust's parser.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from loadgen.core.errors import UsageError


def parse_levels(value: Any) -> list[int] | None:
    if value is None or value == "" or value == []:
        return None
    items = value if isinstance(value, list) else str(value).replace(" ", "").split(",")
    try:
        levels = [int(x) for x in items if str(x) != ""]
    except ValueError:
        raise UsageError(f"--levels: expected comma-separated non-negative integers, got {value!r}") from None
    if any(x < 0 for x in levels):
        raise UsageError(f"--levels: expected non-negative integers, got {value!r}")
    return levels or None


def levels_option(value: str | None) -> list[int] | None:
    """``--levels`` as typed on a command line: None when not given; given, it must name a level (an empty
    value is refused, not read as 'the scenario's levels', which the web UI form's empty field means)."""
    if value is None:
        return None
    levels = parse_levels(value)
    if levels is None:
        raise UsageError(f"--levels: expected comma-separated non-negative integers, got {value!r}")
    return levels


def port_option(value: Any, option: str) -> int:
    """A TCP port given as ``option``: 1..65535, checked before anything starts (Locust would fail on it
    after the run folder was announced)."""
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"{option}: expected a port number 1..65535, got {value!r}") from None
    if not 1 <= port <= 65535:
        raise UsageError(f"{option}: expected a port number 1..65535, got {value!r}")
    return port


def auto_processes(cores: int) -> int:
    """``--processes auto``: one Locust worker per core but one (the master coordinates and takes little);
    0 (one process, no master) on one or two cores, where a master and one worker gain nothing."""
    return 0 if cores <= 2 else cores - 1


def parse_processes(value: Any, cores: int | None = None) -> int:
    """``--processes``: an integer (checked by ``loadgen.studies.run.check_options``) or ``auto``, resolved
    here from the cores this process may use (``cores`` given: from that count)."""
    text = str(value).strip().lower()
    if text == "auto":
        return auto_processes(len(os.sched_getaffinity(0)) if cores is None else cores)
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"--processes: expected an integer or 'auto', got {value!r}") from None


def parse_labels(value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    items = value if isinstance(value, list) else [p for p in str(value or "").split(",") if p.strip()]
    labels: dict[str, str] = {}
    for item in items:
        key, sep, val = str(item).partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--label: expected key=value, got {item!r}")
        labels[key.strip()] = val.strip()
    return labels


WEB_USER_ENV, WEB_PASSWORD_ENV = "LOADGEN_WEB_USER", "LOADGEN_WEB_PASSWORD"


def web_credentials(environ: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """``--web-login``'s user name (default ``loadgen``) and password, from the environment, never argv."""
    password = environ.get(WEB_PASSWORD_ENV, "")
    if not password:
        raise UsageError(f"--web-login: set the web UI's password in the environment variable {WEB_PASSWORD_ENV}")
    return environ.get(WEB_USER_ENV, "") or "loadgen", password
