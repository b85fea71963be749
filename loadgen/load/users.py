"""The users Locust runs: one canary user, and background users that hold the level; the waits for a held level.

Why: the canary user sends each canary only when the stage says so and only once the level is held
(docs/design.md, "held"), and not at all once its level has ended; the background users keep a varied
request in flight each: streamed token by token, handing over to the next request before one ends (the
level a floor), else sending the next once one has ended (a ceiling: docs/design.md, "The level's band"),
and pausing after failures in a row (docs/design.md, "Failing background"). Users are thin: stage arithmetic
lives in ``loadgen.load.stages`` and ``loadgen.load.coordination``, request/timing/fault handling in
``loadgen.load.client``, holding a level in ``loadgen.load.holding``, failing background in
``loadgen.load.failing``, dialects in ``loadgen.core.wire``, writing in ``collectors``.

State: a user takes the run its process takes part in at its start (``loadgen.load.user_side``) and
keeps it; it holds nothing else between tasks but its connections. Importing this module registers
nothing with Locust: ``loadgen/load/locustfile.py`` does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import gevent
import gevent.pool
import orjson
from gevent.event import Event
from locust import User, constant, task
from locust.env import Environment
from locust.user.task import LOCUST_STATE_STOPPING

from loadgen.core.record import CanaryRecord
from loadgen.core.wire.batch import batch_body
from loadgen.core.wire.urls import api_path
from loadgen.load.background import BackgroundBodies, BackgroundBody
from loadgen.load.canary_request import canary_body, canary_record, prepare_cache, reset_before_burst
from loadgen.load.client import Outcome, ResetAnswer, make_client, send, send_payload, split_batch
from loadgen.load.coordination import StageSnapshot
from loadgen.load.failing import SlotFailures, backoff_notice
from loadgen.load.holding import BUFFERED_NOTICE, Progress, Slot, hands_over, level_bound, spawn_delay
from loadgen.load.live import summarise
from loadgen.load.runstate import RunState
from loadgen.load.stages import Ticket
from loadgen.load.user_side import user_side

CANARY_USERS = 1  # Locust's fixed_count: exactly one of the shape's users is the canary user
_POLL_S = 0.005
_ENGINE_POLL_S = 0.05  # the held-level gate asks the engine's /metrics at most this often
_PAUSE_SLICE_S = 0.05  # a slot's pause (failures, a stage whose background failed) checks for a stop this often
log = logging.getLogger(__name__)


def _fire_stats(environment: Environment, name: str, out: Outcome) -> None:
    environment.events.request.fire(
        request_type="POST",
        name=name,
        response_time=(out.latency_s or 0.0) * 1000.0,
        response_length=out.response_bytes,
        context={},
        exception=out.failure(),
    )


def endpoint_client(st: RunState) -> Any:
    """A one-connection client to the run's endpoint with the scenario's timeouts and key."""
    ep = st.scenario.endpoint
    return make_client(
        st.base_url,
        connect_timeout_s=ep.connect_timeout_s,
        read_timeout_s=ep.read_timeout_s,
        api_key=st.api_key,
        request_timeout_s=ep.request_timeout_s,
        max_response_bytes=ep.max_response_bytes,
    )


def _stopping(user: User) -> bool:
    """Locust asked ``user`` to stop and waits for its current task to return (docs/design.md, "A graceful
    stop waits for each user's current task to return"): every loop inside a task asks this."""
    return bool(user._state == LOCUST_STATE_STOPPING)


class CanaryUser(User):
    """Sends the scenario's canaries one at a time, only when the current stage says so."""

    fixed_count = CANARY_USERS
    wait_time = constant(0)

    def on_start(self) -> None:
        self.st = user_side(self.environment).wait_run().state
        self.http = endpoint_client(self.st)

    def on_stop(self) -> None:
        if "http" not in vars(self):
            return  # stopped before the plan came: nothing taken, nothing open
        self.st.mirror.release()
        self.http.close()

    @task
    def canary(self) -> None:
        st = self.st
        while True:
            if st.mirror.finished:
                gevent.sleep(0.2)
                return
            if _stopping(self):
                return  # a stop (the web UI's button, Ctrl-C) while no ticket is held: nothing to finish
            if burst := st.mirror.take_burst():
                self._burst(st, burst)
                return
            if ticket := st.mirror.take_ticket():
                break
            gevent.sleep(_POLL_S)
        self._send(st, ticket, self.http)
        if st.scenario.sweep.canary_pace_s:
            gevent.sleep(st.scenario.sweep.canary_pace_s)

    def _burst(self, st: RunState, tickets: list[Ticket]) -> None:
        """Fire every copy at once, each on its own connection, as the original identical-requests experiment;
        with ``burst_cache = "reset"`` the prefix cache is reset first, once the engine is idle; with
        ``burst_send = "one-request"`` every copy goes in one request (``_burst_in_one_request``)."""
        sweep = st.scenario.sweep
        reset = None
        if sweep.burst_cache == "reset":
            path = st.scenario.endpoint.cache_reset_path
            reset = reset_before_burst(
                self.http, path, timeout_s=sweep.settle_timeout_s, stopping=partial(_stopping, self)
            )
        if sweep.burst_send == "one-request":
            self._burst_in_one_request(st, tickets, reset)
            return
        clients = [endpoint_client(st) for _ in tickets]
        group = gevent.pool.Group()
        try:
            for ticket, http in zip(tickets, clients, strict=True):
                group.spawn(self._send, st, ticket, http, burst=True, burst_reset=reset)
            group.join()
        finally:
            group.kill()
            for http in clients:
                http.close()

    def _burst_in_one_request(self, st: RunState, tickets: list[Ticket], reset: ResetAnswer | None) -> None:
        """Every copy's prompt in one unstreamed request (the scenario checked that the canaries ask the same
        otherwise), then one record per copy with the request's timing and its own part of the answer."""
        canaries = [st.scenario.canaries[t.canary_index] for t in tickets]
        features = st.canary_body_features(tickets[0].canary_index)  # the same for all: the scenario checked
        sent = [canary_body(st.scenario, c, model=st.model, features=features, salt=False) for c in canaries]
        kind = sent[0][0]
        body = batch_body(kind, [b for _, b in sent])
        inflight_at_send = st.inflight.total
        st.inflight.canary += len(tickets)
        try:
            out = send_payload(
                self.http,
                api_path(st.base_url, kind),
                kind,
                orjson.dumps(body),
                stream=False,
                tokens_as_ids=features.tokens_as_ids,
                secret=st.api_key,
                max_tokens=canaries[0].max_tokens,
                batch=len(tickets),
            )
        finally:
            st.inflight.canary -= len(tickets)
        copies = split_batch(out, len(tickets), canaries[0].max_tokens, st.api_key)
        for ticket, canary, (_, one_body), one in zip(tickets, canaries, sent, copies, strict=True):
            record = canary_record(
                one,
                run_id=st.run_dir.name,
                canary=canary,
                kind=kind,
                body=one_body,
                phase=ticket.phase,
                level=ticket.level,
                inflight_at_send=inflight_at_send,
                worker=st.worker,
                cache_action=None if reset is None else "reset",
                cache_reset=reset,
                burst=True,
            )
            self._recorded(st, ticket, record, one)
        if out.cancelled:
            raise gevent.GreenletExit

    def _recorded(self, st: RunState, ticket: Ticket, record: CanaryRecord, out: Outcome) -> None:
        """A canary's record to the collector, its request to Locust's statistics, its summary to the coordinator."""
        self.environment.events.canary_record.fire(record=record)
        _fire_stats(self.environment, f"canary:{record.canary_id}", out)
        assert self.environment.runner is not None
        self.environment.runner.send_message("lg_done", done_summary(st, ticket, record))

    def _send(
        self, st: RunState, ticket: Ticket, http: Any, *, burst: bool = False, burst_reset: ResetAnswer | None = None
    ) -> None:
        canary = st.scenario.canaries[ticket.canary_index]
        features = st.canary_body_features(ticket.canary_index)
        busy = burst or ticket.level > 0 or st.inflight.total > 0
        action, reset = prepare_cache(http, canary, st.scenario.endpoint.cache_reset_path, busy=busy)
        if burst_reset is not None and action is None:  # the burst's one reset, made before any copy went out
            action, reset = "reset", burst_reset
        kind, body = canary_body(st.scenario, canary, model=st.model, features=features, salt=action == "salt")
        gone = partial(_gone, self, st, ticket)
        held = None if burst else _wait_held(st, ticket.level, stopping=gone)
        if not burst and gone():
            return  # stopped, or the level ended, while it was being reached: a canary sent now would not share it
        background_held = st.holding.held
        spec = st.scenario.background
        loaded = not burst and ticket.level > 0  # a sweep canary beside background: its level has a side
        buffered = st.buffering.seen if loaded and spec.stream else None
        bound = level_bound(spec.stream, st.buffering.seen, spec.handover_s, spec.wait_s) if loaded else None
        inflight_at_send = st.inflight.total
        st.inflight.canary += 1
        try:
            out = send(
                http,
                api_path(st.base_url, kind),
                kind,
                body,
                tokens_as_ids=features.tokens_as_ids,
                secret=st.api_key,
            )
        finally:
            st.inflight.canary -= 1
        record = canary_record(
            out,
            run_id=st.run_dir.name,
            canary=canary,
            kind=kind,
            body=body,
            phase=ticket.phase,
            level=ticket.level,
            inflight_at_send=inflight_at_send,
            worker=st.worker,
            cache_action=action,
            cache_reset=reset,
            burst=burst,
            held_at_send=held,
            background_held_at_send=None if burst else background_held,
            background_buffered=buffered,
            level_bound=bound,
        )
        self._recorded(st, ticket, record, out)
        if out.cancelled:
            raise gevent.GreenletExit


def _gone(user: User, st: RunState, ticket: Ticket) -> bool:
    """The canary user was asked to stop, or the stage of its ticket is over (its background failed for good)."""
    return _stopping(user) or st.mirror.moved_on(ticket)


def _wait_held(st: RunState, level: int, *, stopping: Callable[[], bool]) -> bool:
    """Wait until the level is held (docs/design.md, "held"): this process's background slots each hold a
    request the server has started (a ceiling's: one sent and not ended) and, in a distributed run, the
    coordinator's fresh view of every worker says the same; where the background's progress cannot be seen
    (non-streamed, or streamed but coming in one piece: ``holding.Buffering``) the engine's own running count
    (the loaded side's, behind a router) must reach the level too.
    False when ``settle_timeout_s`` passed first (the canary goes anyway, flagged) or when ``stopping()``
    says the user was asked to stop or the level ended (the caller then sends nothing)."""
    deadline = time.monotonic() + st.scenario.sweep.settle_timeout_s
    while not stopping():
        asked_engine = False
        if _level_held(st, level):
            if (st.scenario.background.stream and not st.buffering.seen) or not level:
                return True
            asked_engine = True
            if st.engine.confirms(level, deadline):  # asked within the same deadline: a trickled page ends there
                return True
        if time.monotonic() > deadline:
            return False
        # a /metrics request per 5 ms poll would load the engine while it catches up: ask it every 50 ms
        gevent.sleep(_ENGINE_POLL_S if asked_engine else _POLL_S)
    return False


def _from_send(st: RunState) -> bool:
    """Background that loads the prefill side holds its slot from the send: its first token comes only once its
    prefill is over (docs/design.md, "Prefill/decode: servers behind one endpoint"). A prefill server's gauge
    moves a prefill at a time and rarely shows a whole level at once, so no engine check confirms it (streamed):
    the report measures what each canary's prefill window shared."""
    return st.scenario.background.side == "prefill"


def _level_held(st: RunState, level: int) -> bool:
    h = st.holding
    if not st.distributed:
        return h.slots == level and h.held >= level
    snap = st.mirror.snapshot
    return h.all_held and snap is not None and snap.held


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


def done_summary(st: RunState, ticket: Ticket, record: CanaryRecord) -> dict[str, Any]:
    """A canary completion as the coordinator needs it: counters and hashes, small and msgpack-safe."""
    return summarise(
        canary=record.canary_id,
        stage=ticket.stage_index,
        phase=ticket.phase,
        level=ticket.level,
        status=record.status,
        token_ids=record.token_ids,
        tokens=record.tokens,
        text=record.text,
        reference=st.references.get(record.canary_id),
        background_held=record.background_held_at_send,
    )


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
        self.children = gevent.pool.Group()
        st.holding.slots += 1
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
        process (docs/design.md, "Failing background"); False once Locust asks this user to stop."""
        if _stopping(self):
            return False
        pause = self.failures.pause_s
        if not pause and not _stage_failed(st):
            return True  # the hot path: nothing to wait for
        until = time.monotonic() + pause
        while not _stopping(self):
            left = until - time.monotonic()
            if left <= 0 and not _stage_failed(st):
                return True
            gevent.sleep(min(left, _PAUSE_SLICE_S) if left > 0 else _PAUSE_SLICE_S)
        return False

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
        buffered = st.buffering.seen
        if not stream or _from_send(st) or buffered:
            progress(0)  # a non-streamed (prefill-side, buffered) request counts as started once sent
        st.inflight.background += 1
        try:
            out = send_payload(
                http,
                self.path,
                self.kind,
                body.payload,
                stream=stream,
                secret=st.api_key,
                usage_only=True,
                progress=progress if stream else None,
                max_tokens=body.max_tokens,
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
            {
                "level": level,
                "phase": (snap.phase if snap else None) or "drain",
                "sent_at": out.sent_at,
                "latency_s": out.latency_s,
                "ttft_s": out.ttft_s,
                "status": "ok" if out.ok else "error",
                "error_kind": out.error_kind,
                "error_message": out.error_message,
                "http_status": out.http_status,
                "shared_prefix": body.shared_prefix,
                "prompt_tokens": usage.get("prompt_tokens"),
                "completion_tokens": usage.get("completion_tokens"),
            }
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
