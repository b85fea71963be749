"""Server-provided text made inert in Markdown: the one escape ``report.md`` and ``comparison.md`` use.

Why: model ids, endpoint answers, completions, probe and scraper messages come from a server that may
be hostile. Put raw into Markdown, such a string can open raw HTML, start a heading, render a remote
image or link, break a table, or carry terminal escapes (ESC, an OSC title, BEL, NUL) to whoever
``cat``s the file. ``text`` escapes a string for prose, ``code`` for a code span (tokens, whose
whitespace matters); both write control characters as visible escapes (``\\x1b``) with the same rule
the CLI prints by (``loadgen.core.errors.visible``), line breaks included, so nothing starts a new line.
"""

from __future__ import annotations

import re

from loadgen.core.errors import visible

# Backslash-escaped wherever they appear: everything that opens markup inline (raw HTML, entities,
# links and images, emphasis, strikethrough, code spans) or splits a table cell. ``_`` only where it can
# delimit emphasis: inside a word (``max_tokens``) CommonMark keeps it literal.
_ALWAYS = re.compile(r"([\\`*\[\]<>&|~])|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def _one_line(s: str) -> str:
    return visible(s, keep="")  # line feeds, carriage returns and tabs too: a cell or line never breaks


def text(s: object) -> str:
    """Any value as inert Markdown prose on one line: ``None`` as an em dash."""
    if s is None:
        return "—"
    return _ALWAYS.sub(lambda m: "\\" + m.group(0), _one_line(str(s)))


def code(s: str | None) -> str:
    """A model-produced string as an inert Markdown code span (backticks become ``ˋ``, ``|`` is escaped
    for tables); ``None`` is the end of the completion."""
    if s is None:
        return "*(end)*"
    clean = _one_line(s).replace("|", "\\|").replace("`", "ˋ")
    return f"`{clean}`" if clean.strip() else f"`{clean!r}`"
