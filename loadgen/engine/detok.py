"""Incremental detokenisation with stop strings, for one request.

Why this module exists: the text a client sees must be the decoded bytes of the generated
tokens, never a broken UTF-8 fragment, cut before the first stop string, and in a stream it must
hold back just enough characters that a stop string split across tokens is never shown. Pure:
bytes in, text deltas out.
"""

from __future__ import annotations

import codecs


class TextState:
    """Accumulates token bytes; ``push`` returns the newly safe text and a stop string if hit."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = stops
        self._hold = max((len(s) for s in stops), default=1) - 1
        self.text = ""
        self._emitted = 0
        self.stopped_by: str | None = None

    def push(self, data: bytes) -> str:
        """Add one token's bytes; returns text that is now final (nothing after a stop)."""
        before = len(self.text)
        self.text += self._decoder.decode(data)
        if self._stops:
            window_start = max(0, before - self._hold)
            hits = [(self.text.find(s, window_start), s) for s in self._stops]
            found = [(i, s) for i, s in hits if i >= 0]
            if found:
                cut, stop = min(found)
                self.text = self.text[:cut]
                self.stopped_by = stop
                return self._flush()
        safe = len(self.text) - self._hold
        if safe <= self._emitted:
            return ""
        delta = self.text[self._emitted : safe]
        self._emitted = safe
        return delta

    def finish(self) -> str:
        """Text still held back (and any undecodable tail) once generation has ended."""
        if self.stopped_by is None:
            self.text += self._decoder.decode(b"", final=True)
        return self._flush()

    def _flush(self) -> str:
        delta = self.text[self._emitted :]
        self._emitted = len(self.text)
        return delta
