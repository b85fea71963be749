"""``reports.render.mdtext``: whatever a server sends, the Markdown it becomes is one inert line."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from reports.render.mdtext import code, text

MARKUP = "\\`*[]<>&|~"


def _no_controls(s: str) -> bool:
    return not any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") for c in s)


@given(st.text())
def test_prose_is_one_line_with_every_markup_character_escaped(s: str) -> None:
    out = text(s)
    assert _no_controls(out)
    escaped = False
    for c in out:
        if c in MARKUP and not escaped:
            assert c == "\\", out  # every markup character is preceded by a backslash
            escaped = True
            continue
        escaped = False


@given(st.text())
def test_a_code_span_never_ends_early_or_breaks_a_line(s: str) -> None:
    out = code(s)
    assert _no_controls(out) and out.startswith("`") and out.endswith("`") and out.count("`") == 2
    assert "|" not in out.replace("\\|", "")


def test_what_a_hostile_model_id_becomes() -> None:
    evil = "m`</code><img src=x>\n# pwned ![t](http://e/t.png) \x1b]0;t\x07\x00 max_tokens _em_"
    assert text(evil) == (
        "m\\`\\</code\\>\\<img src=x\\>\\\\n# pwned !\\[t\\](http://e/t.png) \\\\x1b\\]0;t\\\\x07\\\\x00 "
        "max_tokens \\_em\\_"
    )
    assert code("a\x1b[2J|`") == "`a\\x1b[2J\\|ˋ`" and code(None) == "*(end)*"
