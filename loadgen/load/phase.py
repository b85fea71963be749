"""The phase gate: background that loads the engine during one phase of each sweep canary, timed by the canary.

Why: the report attributes a canary's first drift to the kind of engine step that computed it; to confirm that
by intervention, the background must share the engine with only one phase of the canary (docs/design.md,
"Background aimed at one phase"; the mode is ``background.phase``, ``loadgen.core.scenario.phase``):

- **decode** (``from:<p>``): the canary goes out with no background request in flight; once its stream has shown
  ``p`` tokens the gate opens and the level's slots send as they always do; when it ends the gate closes and they
  send nothing more (requests in flight finish). Their prefills then share steps with the canary's decode.
- **prefill**: with no background request in flight, the gate opens a *window* in which each slot sends one
  request; the canary goes once every slot's request has answered (its first token: the engine prefilled it; or
  its end) or the wait ran out, and the window closes first: no background request is sent while the canary runs,
  so its decode steps hold others' decodes only.

The canary user calls ``before_canary``, hands ``canary_tokens`` to its stream and calls ``canary_ended``; each
background slot asks ``wait_turn`` before every request and tells ``sending`` about it. The gate does not hold a
level (``loadgen.load.holding`` does, while it is open) and sends nothing itself. Runs inside gevent (a Locust
process, one hub: no locks); no Locust imports, no I/O. One process only: the coordinator refuses a phase mode in
a distributed run, where the canary's tokens are not seen by other workers' slots.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import gevent
from gevent.event import Event

from loadgen.core.scenario.phase import BackgroundPhase
from loadgen.load.holding import Progress

WAIT_SLICE_S = 0.05  # a waiting slot checks for its stop this often
_CANARY_POLL_S = 0.005  # the canary user's waits check their condition this often (as the held-level gate)


@dataclass
class SlotTurn:
    """One background slot's place in the gate: the prefill window it last sent in (0: none yet)."""

    window: int = 0


def answered(progress: Progress) -> bool:
    """A window's request that no longer keeps the canary waiting: its first token came (the engine prefilled it),
    or it ended without one (failed)."""
    return progress.started or progress.due.is_set()


class PhaseGate:
    """Whether a background slot of this process may send now, by the phase of the canary in flight."""

    def __init__(self, phase: BackgroundPhase) -> None:
        self.phase = phase
        self.open = Event()  # decode: slots may send; prefill: a window is open (one request per slot)
        if not phase.aimed:
            self.open.set()  # "all": always open, nothing waits
        self.window = 0  # prefill: the number of the last window opened
        self.sent: list[Progress] = []  # prefill: the requests sent in the current window

    @property
    def aimed(self) -> bool:
        return self.phase.aimed

    # the background's side

    def wait_turn(self, turn: SlotTurn, stopping: Callable[[], bool]) -> bool:
        """Wait until the slot may send its next request; False once ``stopping()`` says so. In prefill mode each
        window gives each slot one turn."""
        while True:
            if stopping():
                return False
            if self._may_send(turn):
                turn.window = self.window
                return True
            if self.open.is_set():  # a prefill window this slot has sent in: wait for the next one
                gevent.sleep(WAIT_SLICE_S)
            else:
                self.open.wait(WAIT_SLICE_S)

    def _may_send(self, turn: SlotTurn) -> bool:
        if not self.open.is_set():
            return False
        return self.phase.kind != "prefill" or turn.window < self.window

    def sending(self, progress: Progress) -> None:
        """A slot sends a request now, watched by ``progress``: in prefill mode one of the open window's."""
        if self.phase.kind == "prefill" and self.open.is_set():
            self.sent.append(progress)

    # the canary's side

    def before_canary(
        self,
        slots: int,
        *,
        alive: Callable[[], int],
        in_flight: Callable[[], int],
        timeout_s: float,
        stopping: Callable[[], bool],
    ) -> bool:
        """Make the engine ready for a canary at a level of ``slots``: wait until ``alive()`` (this process's
        background slots) is ``slots`` and ``in_flight()`` (its background requests in flight) is 0, then in prefill
        mode open a window and wait until each slot's request has answered, and close it. True when all of it
        happened within ``timeout_s`` (the record's ``held_at_send``); False when the time ran out first (the
        canary goes anyway) or ``stopping()`` (the caller then sends nothing)."""
        deadline = time.monotonic() + timeout_s
        if not self._wait(lambda: alive() == slots and in_flight() == 0, deadline, stopping):
            return False
        if self.phase.kind != "prefill":
            return True
        self.window += 1
        self.sent = []
        self.open.set()
        try:
            return self._wait(lambda: len(self.sent) >= slots and all(map(answered, self.sent)), deadline, stopping)
        finally:
            self.open.clear()

    def canary_tokens(self, tokens: int) -> None:
        """The canary's stream has shown ``tokens`` tokens: in decode mode the gate opens at ``from_token``."""
        if self.phase.kind == "decode" and tokens >= self.phase.from_token:
            self.open.set()

    def canary_ended(self) -> None:
        """The canary's answer is over (or was never sent): no slot sends until the next canary opens the gate."""
        if self.aimed:
            self.open.clear()

    @staticmethod
    def _wait(cond: Callable[[], bool], deadline: float, stopping: Callable[[], bool]) -> bool:
        while not stopping():
            if cond():
                return True
            if time.monotonic() > deadline:
                return False
            gevent.sleep(_CANARY_POLL_S)
        return False
