"""Incremental Server-Sent Events decoder: bytes in, complete events out.

Why it exists: a streamed completion arrives in network chunks that cut lines, CRLF pairs and
multi-byte UTF-8 characters anywhere. This decoder turns such chunks into the events the
WHATWG SSE spec defines, the same whatever the chunking (modelled on httpx's
``_decoders.py::LineDecoder``).

What it must not do: it is pure and runs on the load path inside gevent, so no I/O, no logging,
no clocks, no imports of Locust, gevent or asyncio, and no per-byte Python loops (it works with
``bytes.split``/``bytes.find``). It knows nothing of JSON or of OpenAI payloads; that is
``loadgen.core.wire``.

Spec points kept: lines end in LF, CRLF or CR (a CR ending one chunk may pair with an LF opening
the next); a blank line dispatches an event; ``data`` lines join with LF; one space after the
colon is dropped; lines starting with ``:`` are comments; unknown fields are ignored; an event
with no ``data`` line is not dispatched; a leading UTF-8 BOM is dropped; bytes are decoded per
complete line (invalid UTF-8 becomes U+FFFD), so a character split across chunks is never
mangled.
"""

from __future__ import annotations

from dataclasses import dataclass

_BOM = b"\xef\xbb\xbf"


class LineEnds:
    """Whole lines out of chunks: LF, CRLF or CR line ends in any chunking become LF, a leading UTF-8 BOM
    is dropped, and the unterminated rest waits for the next chunk (``SSEDecoder`` and
    ``loadgen.core.wire.sse_frames.FrameReader`` share it)."""

    __slots__ = ("_bom_checked", "_pending_cr", "rest")

    def __init__(self) -> None:
        self.rest = b""  # bytes of the current, unterminated line
        self._pending_cr = False  # the previous chunk ended in CR: drop one LF opening the next
        self._bom_checked = False

    def whole(self, data: bytes) -> bytes:
        """The whole lines completed by ``data``, each ending in LF (b"" when none); keeps the rest."""
        if self._pending_cr:
            self._pending_cr = False
            if data[:1] == b"\n":
                data = data[1:]
        if b"\r" in data:
            self._pending_cr = data[-1:] == b"\r"
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if self.rest:
            data = self.rest + data
        if not self._bom_checked:
            if len(data) < len(_BOM) and _BOM.startswith(data):
                self.rest = data
                return b""
            self._bom_checked = True
            if data.startswith(_BOM):
                data = data[len(_BOM) :]
        end = data.rfind(b"\n") + 1
        self.rest = data[end:]
        return data[:end]

    def finish(self) -> bytes:
        """End of stream: the unterminated last line (b"" when none), and a fresh state."""
        line, self.rest = self.rest, b""
        self._pending_cr = False
        return line


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event. ``event`` is None when no ``event:`` field was sent (spec: "message")."""

    data: str
    event: str | None = None
    id: str | None = None


class SSEDecoder:
    """Feed it bytes as they arrive; it returns the events completed so far.

    ``flush()`` at end of stream returns the event that was still open (data lines seen but no
    blank line yet). A non-empty ``flush()`` therefore means the stream was cut mid-event; the
    caller decides whether that is a truncation.
    """

    __slots__ = ("_data", "_event", "_last_id", "_lines")

    def __init__(self) -> None:
        self._lines = LineEnds()
        self._data: list[str] = []
        self._event: str | None = None
        self._last_id: str | None = None

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Consume one chunk; return the events it completed, in order."""
        data = self._lines.whole(data) if data else b""
        if not data:
            return []
        lines = data.split(b"\n")
        lines.pop()  # the empty piece after the last LF
        events: list[SSEEvent] = []
        for line in lines:
            if line:
                self._field(line)
            elif self._data:
                events.append(self._dispatch())
            else:
                self._event = None
        return events

    def flush(self) -> list[SSEEvent]:
        """End of stream: return the still-open event (if it carried data) and reset the line state."""
        line = self._lines.finish()
        if line:
            self._field(line)
        if self._data:
            return [self._dispatch()]
        self._event = None
        return []

    def _field(self, line: bytes) -> None:
        if line[:1] == b":":
            return
        colon = line.find(b":")
        if colon < 0:
            name, value = line, b""
        else:
            name, value = line[:colon], line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            self._data.append(value.decode("utf-8", "replace"))
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id" and b"\x00" not in value:
            self._last_id = value.decode("utf-8", "replace")
        # "retry" and unknown fields are ignored, as the spec says.

    def _dispatch(self) -> SSEEvent:
        data = self._data[0] if len(self._data) == 1 else "\n".join(self._data)
        event = SSEEvent(data, self._event, self._last_id)
        self._data = []
        self._event = None
        return event
