"""Values from a run folder in a generated shell script: quoted for sh, and the script read back before it is written.

Why: a reproducer's ``replay.sh`` holds the run's id, the canary's id, the endpoint's URL and the arguments of
the engine the run started, all read from a run folder that may be crafted. A line feed in a value written
into a comment ends the comment and starts a command; a quote in one written into a command line ends the
word. So a value in a command goes through ``shlex.quote``, one in a comment through ``comment_value`` (its
control characters as escapes, then quoted), and ``read_back`` parses the finished text as sh splits it
(``shlex``) and refuses it unless each value came out as the words it was meant to be.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from loadgen.core.errors import RunFolderError, control_character, visible


def comment_value(value: object) -> str:
    """``value`` as a comment may hold it: control characters as escapes (``\\n``, ``\\x1b``), then quoted."""
    return shlex.quote(visible(str(value), keep=""))


def read_back(text: str, words: Sequence[Sequence[str]], in_comments: Sequence[str] = ()) -> None:
    """``text`` parsed back as sh splits it into words: each group of ``words`` (what a value was to become,
    e.g. ``["host=http://h"]``) found as consecutive words, the groups in order; no value of ``in_comments``
    (written into comments) able to end its comment. A ``RunFolderError`` otherwise: the script is not written."""
    try:
        parsed = shlex.split(text, comments=True)
    except ValueError:  # a quote left open
        parsed = None
    at = 0
    for want in words if parsed is not None else [[""]]:
        at = _find(parsed or [], list(want), at)
        if at < 0:
            break
    if at < 0 or any(control_character(v) is not None for v in in_comments):
        raise RunFolderError("replay.sh: a value from the run folder does not read back as written; not written")


def _find(words: list[str], want: list[str], start: int) -> int:
    """The index just past the first run of ``want`` in ``words`` at or after ``start``; -1 where there is none."""
    n = len(want)
    for i in range(start, len(words) - n + 1):
        if words[i : i + n] == want:
            return i + n
    return -1
