"""The phase gate (``loadgen.load.phase``): background slots as greenlets, the canary's side driven by hand.

Each test runs slots that ask ``wait_turn`` and record when they were let through, and plays the canary's part
(``before_canary``, its tokens, its end) step by step, so who sent when is exact.
"""

from __future__ import annotations

import gevent
import pytest

from loadgen.core.scenario.phase import BackgroundPhase, parse_phase
from loadgen.load.holding import Holding, Progress, Slot
from loadgen.load.phase import PhaseGate, SlotTurn


class Slots:
    """``n`` background slots, each sending (counting a turn) whenever the gate lets it, until told to stop."""

    def __init__(self, gate: PhaseGate, n: int) -> None:
        self.gate = gate
        self.holding = Holding(slots=n)
        self.stop = False
        self.sends = [0] * n
        self.progress: list[Progress] = []
        self.greenlets = [gevent.spawn(self._slot, i) for i in range(n)]
        gevent.sleep(0.01)

    def _slot(self, i: int) -> None:
        turn = SlotTurn()
        while self.gate.wait_turn(turn, lambda: self.stop):
            self.sends[i] += 1
            progress = Progress(Slot(self.holding), max_tokens=8, handover_s=0.0)
            self.gate.sending(progress)
            self.progress.append(progress)
            gevent.sleep(0.005)

    def close(self) -> None:
        self.stop = True
        gevent.joinall(self.greenlets, timeout=1)
        assert all(g.dead for g in self.greenlets)


def test_all_lets_every_slot_through_at_once() -> None:
    gate = PhaseGate(BackgroundPhase())
    assert not gate.aimed and gate.wait_turn(SlotTurn(), lambda: False)
    slots = Slots(gate, 2)
    slots.close()
    assert min(slots.sends) > 1


@pytest.mark.parametrize("from_token", [1, 4])
def test_decode_opens_at_the_canarys_token_and_closes_at_its_end(from_token: int) -> None:
    gate = PhaseGate(BackgroundPhase("decode", from_token))
    slots = Slots(gate, 3)
    ready = gate.before_canary(3, alive=lambda: 3, in_flight=lambda: 0, timeout_s=1, stopping=lambda: False)
    assert ready and slots.sends == [0, 0, 0]
    for token in range(1, from_token):
        gate.canary_tokens(token)
        gevent.sleep(0.01)
        assert slots.sends == [0, 0, 0]  # before the p-th token nothing goes
    gate.canary_tokens(from_token)
    gevent.sleep(0.03)
    assert min(slots.sends) >= 1  # every slot sends, again and again, while the canary decodes
    gate.canary_ended()
    gevent.sleep(0.01)
    after_end = list(slots.sends)
    gevent.sleep(0.03)
    assert slots.sends == after_end
    slots.close()


def test_decode_waits_for_the_background_to_drain_before_the_canary() -> None:
    gate = PhaseGate(parse_phase("decode"))
    in_flight = [2]
    gevent.spawn_later(0.05, in_flight.__setitem__, 0, 0)
    t = gevent.get_hub().loop.now()
    assert gate.before_canary(2, alive=lambda: 2, in_flight=lambda: in_flight[0], timeout_s=1, stopping=lambda: False)
    assert gevent.get_hub().loop.now() - t >= 0.04
    never = gate.before_canary(2, alive=lambda: 1, in_flight=lambda: 0, timeout_s=0.03, stopping=lambda: False)
    assert never is False  # a slot missing: the wait runs out, and says so


def test_prefill_gives_each_slot_one_request_before_the_canary_and_none_during_it() -> None:
    gate = PhaseGate(parse_phase("prefill"))
    slots = Slots(gate, 3)
    assert slots.sends == [0, 0, 0]  # no window yet
    # the window stays open until each slot's request has shown its first token
    first = gevent.spawn(
        gate.before_canary, 3, alive=lambda: 3, in_flight=lambda: 0, timeout_s=1, stopping=lambda: False
    )
    gevent.sleep(0.02)
    assert slots.sends == [1, 1, 1] and not first.ready()
    for progress in slots.progress[:2]:
        progress(1)
    slots.progress[2].done()  # one failed before its first token: answered too
    assert first.get(timeout=1) is True
    assert not gate.open.is_set()
    gate.canary_tokens(5)  # the canary's stream opens nothing in prefill mode
    gevent.sleep(0.02)
    gate.canary_ended()
    assert slots.sends == [1, 1, 1]
    # the next canary: one more request per slot
    for progress in slots.progress:
        progress.done()
    second = gevent.spawn(
        gate.before_canary, 3, alive=lambda: 3, in_flight=lambda: 0, timeout_s=1, stopping=lambda: False
    )
    gevent.sleep(0.02)
    for progress in slots.progress[3:]:
        progress(1)
    assert second.get(timeout=1) is True and slots.sends == [2, 2, 2]
    slots.close()


def test_prefill_sends_the_canary_when_the_wait_runs_out() -> None:
    gate = PhaseGate(parse_phase("prefill"))
    slots = Slots(gate, 2)
    ready = gate.before_canary(2, alive=lambda: 2, in_flight=lambda: 0, timeout_s=0.05, stopping=lambda: False)
    assert ready is False and slots.sends == [1, 1]  # no first token came: the canary goes, flagged
    assert not gate.open.is_set()
    slots.close()


def test_a_stop_ends_a_waiting_slot() -> None:
    gate = PhaseGate(parse_phase("from:3"))
    stop = [False]
    waiting = gevent.spawn(gate.wait_turn, SlotTurn(), lambda: stop[0])
    gevent.sleep(0.02)
    stop[0] = True
    assert waiting.get(timeout=1) is False
