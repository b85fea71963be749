"""Server-provided text made inert in HTML: the one escape ``report.html`` and ``comparison.html`` use.

Why: model ids, endpoint answers, completions and notices come from a server that may be hostile.
``html.escape`` stops markup, but not the control characters a terminal acts on (ESC, an OSC title, BEL,
NUL, C1's CSI) when the page's source is ``cat``-ed or grepped, nor a bidi override that reorders what a
reader sees. ``escape`` writes them as visible escapes (``\\x1b``) by the CLI's rule
(``loadgen.core.errors.visible``); line feeds and tabs stay, where a ``<pre>`` shows them.
"""

from __future__ import annotations

import html

from loadgen.core.errors import visible


def escape(s: str, quote: bool = True) -> str:
    """``s`` safe in HTML text and attribute values: markup escaped, control characters shown as escapes."""
    return html.escape(visible(s), quote=quote)
