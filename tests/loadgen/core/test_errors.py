"""A server's message as notices, headlines and the manifest quote it: one short line (``loadgen.core.errors``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.errors import MESSAGE_CHARS, one_line


@given(message=st.text(max_size=2000))
def test_a_quoted_message_is_one_line_and_short(message: str) -> None:
    line = one_line(message)
    if line is None:
        assert not message
        return
    assert len(line) <= MESSAGE_CHARS and "\n" not in line and "\r" not in line
    assert line == " ".join(line.split())


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("<!DOCTYPE html><html><body><h1>404 Not Found</h1>\n<p>nginx</p></body></html>", "an HTML page"),
        ("  spread\n over\tlines  ", "spread over lines"),
        ("x" * 500, "x" * 199 + "…"),
        (None, None),
        ("", None),
    ],
)
def test_an_html_page_is_said_not_pasted_and_a_long_message_cut(message: str | None, said: str | None) -> None:
    assert one_line(message) == said
