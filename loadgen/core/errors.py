"""The project's error tree, and the one rule for secrets in text that reaches a user.

Library code raises these; only the CLI renders them and picks exit codes. Faults from an
endpoint during a run are not errors here: they become records with an ``error_kind``.

An endpoint is not trusted: one that echoes request headers puts the API key into error bodies,
``/version`` or ``/v1/models`` answers and even completions. ``redact`` and ``redact_json`` take
the key out of such text before it is raised, recorded or written. Such text may also hold bytes a
terminal or a Markdown viewer would act on (ESC, an OSC title, BEL, NUL, bidi overrides): ``visible``
writes them as escapes, for the CLI's messages and the Markdown reports alike. They live here because
every package, ``collectors`` and ``reports`` included, may import this module.
"""

from __future__ import annotations

import unicodedata
from typing import Any

REDACTED = "[redacted]"


class LoadgenError(Exception):
    """Base of every error the CLI renders as a one-line message (exit code 2)."""


class ScenarioError(LoadgenError):
    """A scenario file is unreadable or invalid; the message names the file and the field."""


class EndpointError(LoadgenError):
    """The endpoint cannot be used (unreachable, not OpenAI-compatible, unknown model); names the URL."""


class RunFolderError(LoadgenError):
    """A run folder is missing, unreadable or of an unknown schema; names the path."""


class EngineError(LoadgenError):
    """An engine process could not be started or never became healthy; carries command and log tail."""


class EngineArgsError(EngineError):
    """The engine refused its command-line arguments (its parser's one line): bad input, so no log is kept."""


class UsageError(LoadgenError):
    """A command-line value is invalid; names the option."""


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced by ``[redacted]`` (unchanged without a secret)."""
    return text.replace(secret, REDACTED) if secret and secret in text else text


def redact_json(value: Any, secret: str | None) -> Any:
    """A copy of a decoded JSON value with ``secret`` redacted from every string in it, keys included."""
    if not secret:
        return value
    if isinstance(value, str):
        return redact(value, secret)
    if isinstance(value, dict):
        return {redact(str(k), secret): redact_json(v, secret) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_json(v, secret) for v in value]
    return value


_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})  # controls, format (bidi) and unassigned


_CONTROL = frozenset({"Cc", "Zl", "Zp"})  # C0 and C1 controls, DEL, line and paragraph separators


def control_character(text: str) -> str | None:
    """The first control character of ``text`` (a line feed, ESC, DEL, U+2028), or None.

    A name that lands in a generated shell script or TOML file, or on a terminal, must hold none: a line
    feed in a run id would start a new command in a reproducer's ``replay.sh``."""
    return next((c for c in text if unicodedata.category(c) in _CONTROL), None)


def visible(text: str, keep: str = "\n\t") -> str:
    """``text`` with every character a terminal could act on, or hide, written as its escape: ESC as
    ``\\x1b``, BEL as ``\\x07``, NUL as ``\\x00``, a right-to-left override as ``\\u202e``. Characters in
    ``keep`` stay as they are (by default line feeds and tabs: messages span lines)."""
    return "".join(
        c.encode("unicode_escape").decode("ascii") if c not in keep and unicodedata.category(c) in _HIDDEN else c
        for c in text
    )


MESSAGE_CHARS = 200  # a server's message as a notice, a headline or the manifest quotes it: cut to this


def one_line(message: str | None, limit: int = MESSAGE_CHARS) -> str | None:
    """A server's message as one short line: an HTML page said as such (not pasted), whitespace folded, cut to
    ``limit`` characters; None for no message. One rule for the load side's notices and the reports."""
    if not message:
        return None
    text = " ".join(str(message).split())
    if text[:200].lower().startswith(("<!doctype html", "<html")) or "<body" in text[:400].lower():
        return "an HTML page"
    return text if len(text) <= limit else text[: limit - 1] + "…"
