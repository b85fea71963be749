"""The background users Locust runs: each keeps one varied request in flight, a slot of the level.

Why: a level is a promise of other requests beside each canary (docs/design.md, "The level's band"). Streamed
token by token, a slot hands over to its next request before the current one ends (the level a floor); where
its progress cannot be seen it sends the next once the current one has ended (a ceiling); after failures in a
row it pauses, and a level whose background fails for good ends (docs/design.md, "Failing background"). How a
slot holds its level is ``loadgen.load.holding``'s, its pauses ``loadgen.load.failing``'s; this module only
sends and counts. Importing it registers nothing with Locust: ``loadgen/load/locustfile.py`` does.
"""

from __future__ import annotations

import logging
import time
from functools import partial
from typing import Any

import gevent
import gevent.pool
from gevent.event import Event
from locust import User, constant, task

from loadgen.core.background_row import BackgroundRow
from loadgen.core.wire.urls import api_path
from loadgen.load.background import BackgroundBodies, BackgroundBody
from loadgen.load.client import Outcome, send_background
from loadgen.load.coordination import StageSnapshot
from loadgen.load.failing import SlotFailures, backoff_notice
from loadgen.load.holding import BUFFERED_NOTICE, Progress, Slot, hands_over, spawn_delay
from loadgen.load.phase import SlotTurn
from loadgen.load.runstate import RunState
from loadgen.load.user_side import user_side
from loadgen.load.users import asked_to_stop, endpoint_client

_PAUSE_SLICE_S = 0.05  # a slot's pause (failures, a stage whose background failed) checks for a stop this often
log = logging.getLogger(__name__)


def _from_send(st: RunState) -> bool:
    """Background that loads the prefill side holds its slot from the send: its first token comes only once its
    prefill is over (docs/design.md, "Prefill/decode: servers behind one endpoint"). A prefill server's gauge
    moves a prefill at a time and rarely shows a whole level at once, so no engine check confirms it (streamed):
    the report measures what each canary's prefill window shared."""
    return st.scenario.background.side == "prefill"


def _say_buffered(st: RunState) -> None:
    """Once per process: the held-level gate's notice (the process file carries it to the manifest) and the log."""
    if BUFFERED_NOTICE not in st.engine.notices:
        st.engine.notices.append(BUFFERED_NOTICE)
        log.warning("%s", BUFFERED_NOTICE)


def _say_backing_off(st: RunState, failures: SlotFailures) -> None:
    """Once per process, when a slot first pauses after failures: a notice (the process file carries it to the
    manifest) and the log."""
    if not st.backoff_said:
        st.backoff_said = True
        notice = backoff_notice(failures.in_a_row, failures.first_message)
        st.engine.notices.append(notice)
        log.warning("%s", notice)


class BackgroundUser(User):
    """One background slot: keeps a varied request in flight, on the side of its level its progress allows.

    How the slot holds its level (a seeded first delay, started requests, a floor's hand-overs or a
    ceiling's sends once the last request ended) is ``loadgen.load.holding``'s, its pauses after failures
    ``loadgen.load.failing``'s; this class only sends. A hand-over overlaps two requests, so the slot has two
    connections, one per lane; a ceiling uses the first."""

    wait_time = constant(0)

    def on_start(self) -> None:
        run = user_side(self.environment).wait_run()
        self.st = st = run.state
        self.background_stats = run.background_stats
        spec = st.scenario.background
        index = st.next_user_index()
        self.clients = [endpoint_client(st), endpoint_client(st)]
        self.kind = spec.kind or st.scenario.endpoint.kind
        probed = st.features.get(self.kind)  # token counts on streamed answers only where the probe saw them
        self.bodies = BackgroundBodies(
            spec,
            index,
            kind=self.kind,
            model=st.model,
            stream=spec.stream,
            usage=probed is not None and probed.include_usage,
        )
        self.path = api_path(st.base_url, self.kind)
        self.slot = Slot(st.holding)
        self.failures = SlotFailures()
        self.turn = SlotTurn()  # its place in the phase gate (background.phase)
        self.children = gevent.pool.Group()
        st.holding.slots += 1
        if not st.phase_gate.aimed:  # aimed at one phase, the slots wait for the canary, each counted from now
            gevent.sleep(spawn_delay(spec.seed, index, spec.spawn_jitter_s))

    def on_stop(self) -> None:
        if "clients" not in vars(self):
            return  # stopped before the plan came: nothing started, nothing open
        self.children.kill()
        self.st.holding.slots -= 1
        for http in self.clients:
            http.close()

    @task
    def background(self) -> None:
        """Requests back to back until Locust asks this user to stop, in one task call.

        One task per request would add Locust's task scheduling and a zero-second wait (a hub switch) to
        every request; the loop checks the stop request Locust leaves (``_state``) after each request, so
        a stop ends it as promptly as a task boundary would. With ``wait_s`` each request is its own
        task, and the pause is taken in it as before. A floor's lanes end when the stream is seen coming in
        one piece; the next task call goes on as a ceiling."""
        st = self.st
        spec = st.scenario.background
        if hands_over(spec.stream, st.buffering.seen, spec.handover_s, spec.wait_s):
            self._handing_over(st, spec.handover_s)
            return
        while True:  # a ceiling: the next request once the last has ended
            # the hub runs what is ready first (other slots reading their answers): sends then go out together,
            # and the server takes them in fewer wake-ups (as a floor's lanes do, and the bare loop's pool check)
            gevent.sleep(0)
            if not self._may_send(st):
                return
            self._one(st, self.bodies.next(), spec.stream, self.clients[0])
            if spec.wait_s:
                gevent.sleep(spec.wait_s)
                return

    def _may_send(self, st: RunState) -> bool:
        """Wait out this slot's pause after failed requests, and a stage whose background failed for good in this
        process (docs/design.md, "Failing background"), then the phase gate's turn (``loadgen.load.phase``: always
        at once unless ``background.phase`` aims the background at one phase of the canary); False once Locust
        asks this user to stop."""
        if asked_to_stop(self):
            return False
        pause = self.failures.pause_s
        if not pause and not _stage_failed(st):
            return not st.phase_gate.aimed or self._turn(st)  # the hot path: nothing to wait for
        until = time.monotonic() + pause
        while not asked_to_stop(self):
            left = until - time.monotonic()
            if left <= 0 and not _stage_failed(st):
                return not st.phase_gate.aimed or self._turn(st)
            gevent.sleep(min(left, _PAUSE_SLICE_S) if left > 0 else _PAUSE_SLICE_S)
        return False

    def _turn(self, st: RunState) -> bool:
        """The phase gate's turn for this slot's next request; False once Locust asks this user to stop."""
        return st.phase_gate.wait_turn(self.turn, partial(asked_to_stop, self))

    def _handing_over(self, st: RunState, handover_s: float) -> None:
        """Two lanes, one per connection, each a greenlet for the slot's life sending requests one after another:
        a lane sends its next request once its own last one has ended and the other lane's latest is at its
        hand-over point, as its tokens say. The order is that of a greenlet spawned per request (the successor
        starts at its predecessor's hand-over point, once the request before that has ended), without a spawn, a
        join and their hub callbacks per request (``benchmarks/generator_ceiling.py``). Both lanes end once the
        stream is seen coming in one piece: no token says a hand-over point any more."""
        handed = (Event(), Event())  # a lane's turn: the request it follows has been started
        follows: list[Progress | None] = [None, None]  # for each lane, the request its next one follows
        over = [False]  # stopping, cancelled, failed or buffered: each lane ends at its next turn
        handed[0].set()  # the slot's first request follows none
        lanes = [self.children.spawn(self._lane, st, lane, handover_s, handed, follows, over) for lane in (0, 1)]
        gevent.joinall(lanes)  # a lane that failed is logged by gevent, and the other ends at its next turn

    def _lane(
        self,
        st: RunState,
        lane: int,
        handover_s: float,
        handed: tuple[Event, Event],
        follows: list[Progress | None],
        over: list[bool],
    ) -> None:
        other = lane ^ 1
        http = self.clients[lane]
        progress = None
        try:
            while True:
                handed[lane].wait()
                handed[lane].clear()
                before = follows[lane]
                if before is not None:
                    before.due.wait()
                # the hub runs what is ready first (other lanes reading their answers): sends then go out
                # together, and the server takes them in fewer wake-ups (as the bare loop's pool check yields)
                gevent.sleep(0)
                if over[0] or st.buffering.seen or not self._may_send(st):
                    return
                body = self.bodies.next()
                progress = Progress(self.slot, body.max_tokens, handover_s)
                follows[other] = progress
                handed[other].set()  # the other lane runs once this one waits, inside the send
                self._one(st, body, True, http, progress)
        finally:
            over[0] = True
            handed[other].set()
            if progress is not None:
                progress.due.set()  # a lane waiting on it wakes even where the request never got to its end

    def _one(
        self, st: RunState, body: BackgroundBody, stream: bool, http: Any, progress: Progress | None = None
    ) -> None:
        snap = st.mirror.snapshot  # None or finished once the last canary is in: background drains until the stop
        level = snap.level if snap is not None else None
        if progress is None:
            progress = Progress(self.slot, body.max_tokens, 0.0)
        st.phase_gate.sending(progress)
        buffered = st.buffering.seen
        if not stream or _from_send(st) or buffered:
            progress(0)  # a non-streamed (prefill-side, buffered) request counts as started once sent
        st.inflight.background += 1
        try:
            out = send_background(
                http,
                self.path,
                self.kind,
                body.payload,
                body.request_id,
                stream=stream,
                max_tokens=body.max_tokens,
                secret=st.api_key,
                progress=progress if stream else None,
            )
        finally:
            st.inflight.background -= 1
            progress.done()
        watched = out.ok and stream and not _from_send(st)  # a prefill-side slot is held from its send anyway
        if watched and st.buffering.observe(out.ttft_s, out.latency_s, progress.tokens):
            _say_buffered(st)
        self._count(st, snap, out)
        usage = out.usage or {}
        st.background.on_request(
            BackgroundRow(
                level=level,
                phase=(snap.phase if snap else None) or "drain",
                sent_at=out.sent_at,
                latency_s=out.latency_s,
                ttft_s=out.ttft_s,
                status="ok" if out.ok else "error",
                error_kind=out.error_kind,
                error_message=out.error_message,
                http_status=out.http_status,
                shared_prefix=body.shared_prefix,
                prompt_tokens=usage.get("prompt_tokens"),
                completion_tokens=usage.get("completion_tokens"),
            )
        )
        self.background_stats.add(out)
        if out.cancelled:
            raise gevent.GreenletExit

    def _count(self, st: RunState, snap: StageSnapshot | None, out: Outcome) -> None:
        """A request that ended: this slot's failures in a row, and its sweep stage's failures in this process
        (docs/design.md, "Failing background"); a cancelled one is neither."""
        if self.failures.ended(out.error_kind, out.error_message):
            _say_backing_off(st, self.failures)
        if snap is None or snap.phase != "sweep" or snap.burst or not snap.level:
            return
        if st.failures.ended(snap.index, out.error_kind, out.error_message, st.holding.slots):
            failed = st.failures.report()
            assert failed is not None
            log.warning(
                "level %s: background failed for good in this process (%d of %d requests failed; first refused: %s); "
                "its background stops and the level ends",
                snap.level,
                failed.background_errors,
                failed.background_requests,
                failed.first_error,
            )


def _stage_failed(st: RunState) -> bool:
    """The stage going now is one whose background failed for good in this process: its slots send nothing more."""
    failed, snap = st.failures.failed_stage, st.mirror.snapshot
    return failed is not None and snap is not None and snap.index == failed
