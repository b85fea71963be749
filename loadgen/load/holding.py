"""Holding a level: background slots that the server has really started, hand-overs, and the canary's gate.

Why: a level is a promise that the canary shares the engine with ``level`` other requests for its whole
life. Closed-loop users break it in two ways: started together they finish and reconnect together (the
engine's batch saws between full and nearly empty), and each finished request leaves its slot empty
until the next one is admitted. So, per background user (a *slot*):

- its first request waits a seeded random delay (``spawn_delay``), so slots never move as a wave;
- the canary goes out only when every slot holds a started request (``Holding.held``).

How a slot goes from one request to the next decides which side of its level it errs on
(``loadgen.core.band``; docs/design.md, "The level's band"), and depends on whether its progress can be seen
(``hands_over``):

- a **floor** where the background is streamed token by token (``background.stream``, not seen coming in
  one piece, ``handover_s > 0``, no ``wait_s``): a request counts as *started* at its first generated token
  (the engine runs it: some servers send a role chunk before admitting a request; behind a prefill/decode
  router, a request that loads the prefill side when it is sent, its first token coming only once its
  prefill is over), and near its end (``HANDOVER_TOKENS`` tokens still to come, or as many as its first piece
  read held where that was more, or an expected remaining time, from those tokens and the pace they came at,
  of at most ``handover_s``: ``Progress.due``) the slot starts its successor, so the engine never runs fewer
  than ``level`` background requests, and for a few steps at each hand-over one more;
- a **ceiling** everywhere else: a non-streamed request, a stream that comes in one piece, ``handover_s = 0``
  or ``wait_s > 0``. Nothing tells how far such a request has got (an answer's time need not grow with its
  length: a hosted API, a buffering proxy), so the slot sends its next request only once the last one has
  ended: never more than ``level`` background requests in flight from the client, a slot empty for the
  moment between an end and the next send. A request counts as started when it is sent (or, streamed with
  no hand-over, at its first token), and the gate asks the engine's running count to confirm the level where
  it has one (``engine_check``).

A stream that comes in one piece (a buffering proxy between the generator and the engine sends every
token of an answer at once, after the whole generation) shows no started request either: its slot is
past its first token only for the instant before its end, so no level would ever be held and every
canary would wait ``settle_timeout_s``. ``Buffering`` sees it (first and last token together, after a
wait, ``BUFFERED_AFTER`` answers in a row); from then on the process's slots are ceilings, their requests
held from the send. Runs inside gevent (a Locust process); no Locust imports, no I/O.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from gevent.event import Event

from loadgen.core.band import CEILING, FLOOR, LevelBound

_JITTER_SEED = 0x7177E4
HANDOVER_TOKENS = 3  # steps the successor has, at least, to reach the engine and be admitted


def spawn_delay(seed: int, user_index: int, spawn_jitter_s: float) -> float:
    """The seeded delay before a background user's first request: uniform in [0, spawn_jitter_s)."""
    if spawn_jitter_s <= 0:
        return 0.0
    return random.Random((seed * 1_000_003 + user_index) ^ _JITTER_SEED).uniform(0.0, spawn_jitter_s)


def hands_over(stream: bool, buffered: bool, handover_s: float, wait_s: float) -> bool:
    """Whether a slot starts its next request before its request ends, at a hand-over point seen from its tokens
    (a floor), rather than once it has ended (a ceiling): only a stream seen token by token can show that point."""
    return stream and not buffered and handover_s > 0 and not wait_s


def level_bound(stream: bool, buffered: bool, handover_s: float, wait_s: float) -> LevelBound:
    """Which side of its level a process's background errs on (``loadgen.core.band``): see ``hands_over``."""
    return FLOOR if hands_over(stream, buffered, handover_s, wait_s) else CEILING


@dataclass
class Holding:
    """This process's background slots: how many exist, how many hold a request the server has started."""

    slots: int = 0  # background users alive in this process
    held: int = 0  # of those, slots with at least one request the server has started and not finished

    @property
    def all_held(self) -> bool:
        return self.held >= self.slots


class Slot:
    """One background user's hold: its requests started by the server and not yet finished."""

    def __init__(self, holding: Holding) -> None:
        self.holding = holding
        self.started = 0

    def start(self) -> None:
        self.started += 1
        if self.started == 1:
            self.holding.held += 1

    def finish(self) -> None:
        self.started -= 1
        if self.started == 0:
            self.holding.held -= 1


class Progress:
    """Watches one streamed background request: marks its slot started at the first token, and says
    (``due``) when ``HANDOVER_TOKENS`` tokens are still to come (``max_tokens`` minus the tokens seen)
    or, sooner on a slow engine, when those tokens at the pace they came at take ``handover_s``.

    A first piece read of several tokens (an engine that streams at an interval, a generator that woke
    late) says two things. The pace is timed from that piece over the tokens after it: its tokens were
    generated before it was read, and counting them made the pace look that many times faster, started
    the successor near the start of its request and doubled the slot for most of its life. And the
    stream may be seen that many tokens at a time, or that late, again at its end: the successor is due
    that many tokens before the end when that is more than ``HANDOVER_TOKENS``."""

    __slots__ = ("_first_tokens", "_t_first", "due", "handover_s", "max_tokens", "slot", "started", "tokens")

    def __init__(self, slot: Slot, max_tokens: int, handover_s: float) -> None:
        self.slot = slot
        self.max_tokens = max_tokens
        self.handover_s = handover_s
        self.tokens = 0
        self.started = False
        self._t_first = 0.0
        self._first_tokens = 1  # tokens in the first piece read (at least one: a send counts as the first)
        self.due = Event()

    def __call__(self, tokens: int) -> None:
        """Called with the number of tokens seen so far (a non-streamed request: with 0 when sent)."""
        if not self.started:
            self.started = True
            self._t_first = time.perf_counter()
            self._first_tokens = max(tokens, 1)
            self.slot.start()
        self.tokens = tokens
        if tokens < 1 or self.due.is_set():
            return
        left = self.max_tokens - tokens
        after = tokens - self._first_tokens  # tokens generated since the first piece was read
        pace = (time.perf_counter() - self._t_first) / after if after >= 1 else None
        if left <= self.lead_tokens or (pace is not None and left * pace <= self.handover_s):
            self.due.set()

    @property
    def lead_tokens(self) -> int:
        """Tokens still to come when the successor is due at the latest: ``HANDOVER_TOKENS``, or the first
        piece's tokens where it held more."""
        return max(HANDOVER_TOKENS, self._first_tokens)

    def read_pause(self, most_s: float) -> float:
        """How long the stream's reader may let pass before its next read, ``most_s`` at most, without
        seeing the hand-over point, or then the predicted end, late: 0 until the pace is known; then half
        the time until, at that pace, the hand-over is due, and once it is (the successor has started)
        until the last token. A stream that ends early (an end-of-sequence token) is seen up to ``most_s``
        late. ``tests/loadgen/load/test_holding.py`` checks the hand-over is seen within one token."""
        after = self.tokens - self._first_tokens
        if after < 1:
            return 0.0
        # a floor of the pace, not __call__'s estimate: the tokens seen came before now and the next one
        # has not, so the time since the first piece over the tokens since, plus one, is at most a token's
        # time (at a steady pace), while over the gaps between them it is at least that, and would put
        # the point too late
        pace = (time.perf_counter() - self._t_first) / (after + 1)
        ahead = (self.max_tokens - self.tokens) * pace
        if not self.due.is_set():
            ahead -= max(self.lead_tokens * pace, self.handover_s)  # the test in __call__, ahead of time
        return min(most_s, max(0.0, ahead / 2))  # half: a pace that quickens is caught a few reads later

    def done(self) -> None:
        if self.started:
            self.slot.finish()
        self.due.set()


BUFFERED_AFTER = 3  # streamed answers in a row that came in one piece before the background counts as buffered
BUFFERED_TOKEN_S = 0.001  # at most this per token after the first: no engine generates a batch's tokens faster
BUFFERED_SHARE = 0.1  # and all of them within this share of the wait for the first: they came after a pause
BUFFERED_WAIT_S = 0.05  # of at least this: a proxy holds an answer for the whole generation


def in_one_piece(ttft_s: float | None, latency_s: float | None, tokens: int) -> bool:
    """A streamed answer whose tokens arrived together after a wait (``BUFFERED_WAIT_S`` at least): from its
    first token to its end at most ``BUFFERED_TOKEN_S`` per later token and ``BUFFERED_SHARE`` of that wait."""
    if ttft_s is None or latency_s is None or tokens < 2 or ttft_s < BUFFERED_WAIT_S:
        return False
    span = max(latency_s - ttft_s, 0.0)
    return span <= (tokens - 1) * BUFFERED_TOKEN_S and span <= BUFFERED_SHARE * ttft_s


class Buffering:
    """Whether this process's streamed background comes in one piece (``in_one_piece``, ``BUFFERED_AFTER`` in a
    row); once it does it stays so for the run."""

    def __init__(self) -> None:
        self.in_a_row = 0
        self.seen = False

    def observe(self, ttft_s: float | None, latency_s: float | None, tokens: int) -> bool:
        """Count one finished streamed background answer; True only for the one that makes ``seen`` true."""
        if self.seen:
            return False
        self.in_a_row = self.in_a_row + 1 if in_one_piece(ttft_s, latency_s, tokens) else 0
        self.seen = self.in_a_row >= BUFFERED_AFTER
        return self.seen


BUFFERED_NOTICE = (
    "Streamed background came in one piece: every answer's first and last token arrived together, after the "
    "whole generation (a buffering proxy between loadgen and the engine does this; so do answers too short to "
    "see their tokens come one by one), so no background request showed it had started or was about to end. "
    "Levels were held from each request's send instead, each background user sending its next request only once "
    "the last had ended (the level a ceiling, a user's slot empty for a moment between requests), confirmed by "
    "the engine's /metrics running count where it has one. To hold them by the first token, send to the engine "
    "itself or turn the proxy's response buffering off (nginx: proxy_buffering off), or give the background "
    "longer answers (background.max_tokens)."
)
