"""Reading a background stream by its frames: count the events, parse only the few that matter.

Why it exists: a background request is timed and counted, never analysed; what the run needs from its
stream is when the first token came, how many events followed (hand-overs watch them), whether it
ended with ``[DONE]``, the token counts of its usage chunk and any error the server sent. Decoding every
event into a string and parsing it as JSON (``SSEDecoder`` + ``StreamAccumulator``, the canary's path)
costs most of a generator core at a few thousand events a second (docs/design.md, "Streams are decoded
incrementally"). ``FrameReader`` finds the SSE frames with byte operations and parses in full, through
the same ``StreamAccumulator``, only the frames that can change the outcome:

- every frame up to and including the first that carries a generated token (a role chunk comes first
  on some servers; the first token is what times ``ttft_s`` and starts the slot);
- every frame that names ``"error"``, states a usage object, or does not look like a chunk (not
  ``{...}`` with as many ``}`` as ``{``, or no ``"choices"``): an error, the token counts, or a
  malformed payload (not JSON, cut short, not an object), exactly as the canary's path sees them.

Every other frame is counted: from the first token on, each event is one more (as the canary path counts
them). A run of such frames read at once (a client behind the server reads many per system call) is
counted with a few byte counts over the whole run, with no Python step per frame. What this reader does
not check, unlike the canary path: the inside of a frame that looks like a chunk (a ``choices`` that is
not a list, a text that is not a string, braces that balance only because a string inside holds some, or,
over a run, a frame one brace short beside one a brace over); such a frame is counted, since nothing is
built from it. The endpoint kind is a parameter (``Kind``); dialects stay in ``loadgen.core.wire.response``.

SSE framing is the decoder's (``loadgen.core.wire.sse``): LF, CRLF or CR line ends in any chunking, a blank
line dispatches, ``data`` lines join with LF, one space after the colon dropped, comments and other
fields ignored, a leading UTF-8 BOM dropped, the open event dispatched by ``finish``. Pure: no I/O, no
clocks, no logging, no Locust, gevent or asyncio; no per-byte Python loops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen.core.wire.response import StreamAccumulator
from loadgen.core.wire.sse import LineEnds
from loadgen.core.wire.types import Kind

_SHORT = 64  # frames shorter than this are parsed whatever they hold: ``[DONE]`` and its spellings are short


@dataclass(frozen=True, slots=True)
class FrameSummary:
    """What a background stream said: ``done`` (``[DONE]`` arrived), the last usage object, and ``counted``
    (events from the first token-carrying one on, as ``progress`` was told)."""

    done: bool
    usage: dict[str, Any] | None
    counted: int


def _needs_parse(payload: bytes) -> bool:
    """A frame whose content can change the outcome: an error, a usage object, or not a plain chunk."""
    if payload[:1] != b"{" or payload[-1:] != b"}" or b'"choices"' not in payload:
        return True
    if payload.count(b"{") != payload.count(b"}"):
        return True  # a chunk cut short (a prefix of an object that ends in "}" leaves one open)
    if b'"error"' in payload:
        return True
    return b'"usage"' in payload and b'"usage":null' not in payload and b'"usage": null' not in payload


class FrameReader:
    """Feed it the body as it arrives; ``feed`` returns how many events to count from that piece.

    Raises what ``StreamAccumulator.add`` raises (``StreamError``, ``MalformedResponse``) for a frame it
    parses. ``counted`` rising from 0 marks the first generated token."""

    __slots__ = ("_acc", "_data", "_ends", "counted")

    def __init__(self, kind: Kind) -> None:
        self._acc = StreamAccumulator(kind)  # only the frames parsed in full go in: its usage is the stream's
        self._ends = LineEnds()
        self._data: list[bytes] = []  # data lines of the open event
        self.counted = 0

    @property
    def done(self) -> bool:
        """``[DONE]`` has arrived."""
        return self._acc.done

    def feed(self, data: bytes) -> int:
        """Consume one piece of the body; return the events it completed that count (see ``FrameSummary``)."""
        data = self._ends.whole(data) if data else b""
        if not data:
            return 0
        end = len(data)  # data is whole lines
        before = self.counted
        pos = 0
        if self._data or not self.counted:  # an event still open, or no token yet: line by line until settled
            pos = self._lines(data, 0, end, settle=True)
        if pos < end and self.counted:
            pos = self._plain_run(data, pos, end)
        if pos < end:
            self._lines(data, pos, end, settle=False)
        return self.counted - before

    def _lines(self, data: bytes, pos: int, end: int, *, settle: bool) -> int:
        """Read ``data[pos:end]`` line by line; with ``settle``, stop after the first event dispatched once a
        token has come (the rest may be a run of plain chunks). Returns where it stopped."""
        pending = self._data
        while pos < end:
            nl = data.find(b"\n", pos, end)
            line = data[pos:nl]
            pos = nl + 1
            if line[:5] == b"data:":
                pending.append(line[6:] if line[5:6] == b" " else line[5:])
            elif not line:
                if pending:
                    self._dispatch(pending)
                    pending.clear()
                    if settle and self.counted:
                        return pos
            elif line == b"data":
                pending.append(b"")
        return pos

    def _plain_run(self, data: bytes, pos: int, end: int) -> int:
        """Count in bulk the events of ``data[pos:]`` up to its last blank line when every one of them is a
        plain token chunk: one ``data: {...}`` line each, no error, no usage object, braces balanced (summed
        over the run: the bulk form of ``_needs_parse``). Returns where the run ended (``pos``: not one)."""
        stop = data.rfind(b"\n\n", pos, end) + 2
        if stop < 2 or not data.startswith(b"data: {", pos):
            return pos
        frames = data.count(b"\n\n", pos, stop)
        if (
            data.count(b"\n", pos, stop) != 2 * frames
            or data.count(b"}\n\ndata: {", pos, stop) != frames - 1
            or data[stop - 3 : stop] != b"}\n\n"
            or data.count(b'"choices"', pos, stop) != frames
            or data.find(b'"error"', pos, stop) >= 0
            or data.count(b"{", pos, stop) != data.count(b"}", pos, stop)
        ):
            return pos
        usage = data.count(b'"usage"', pos, stop)
        if usage and usage != data.count(b'"usage":null', pos, stop) + data.count(b'"usage": null', pos, stop):
            return pos
        self.counted += frames
        return stop

    def finish(self) -> FrameSummary:
        """End of stream: dispatch the open event (its last line may lack an end), then say what came."""
        line = self._ends.finish()
        if line[:5] == b"data:":
            self._data.append(line[6:] if line[5:6] == b" " else line[5:])
        elif line == b"data":
            self._data.append(b"")
        if self._data:
            self._dispatch(self._data)
            self._data.clear()
        return FrameSummary(self._acc.done, self._acc.finish().usage, self.counted)

    def _dispatch(self, lines: list[bytes]) -> None:
        if self.counted:
            self.counted += 1
            payload = lines[0]
            if len(lines) == 1 and len(payload) >= _SHORT and not _needs_parse(payload):
                return  # a plain token chunk: counted, not parsed
        if self._acc.add(_text(lines)) and not self.counted:
            self.counted = 1


def _text(lines: list[bytes]) -> str:
    """The event's data as the decoder gives it: each line decoded (invalid UTF-8 as U+FFFD), joined with LF."""
    if len(lines) == 1:
        return lines[0].decode("utf-8", "replace")
    return "\n".join(line.decode("utf-8", "replace") for line in lines)
