"""The canary user Locust runs, the wait for a held level, and what every user of the run shares (its client).

Why: the canary user sends each canary only when the stage says so and only once the level is held
(docs/design.md, "held"; with ``background.phase`` aimed at one phase of it, once ``loadgen.load.phase``'s gate
has readied the engine instead), and not at all once its level has ended. The background users that hold the level
are ``loadgen.load.background_user``'s. Users are thin: stage arithmetic lives in ``loadgen.load.stages`` and
``loadgen.load.coordination``, request/timing/fault handling in ``loadgen.load.client``, holding a level in
``loadgen.load.holding``, dialects in ``loadgen.core.wire``, writing in ``collectors``.

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
from locust import User, constant, task
from locust.env import Environment
from locust.user.task import LOCUST_STATE_STOPPING

from loadgen.core.record import CanaryRecord
from loadgen.core.wire.batch import batch_body
from loadgen.core.wire.urls import api_path
from loadgen.load.cache_reset import ResetAnswer
from loadgen.load.canary_request import (
    CacheStep,
    canary_body,
    canary_record,
    choice_records,
    new_request_id,
    prepare_cache,
    reset_before_burst,
    send_choices,
)
from loadgen.load.client import Outcome, make_client, send_burst
from loadgen.load.holding import level_bound
from loadgen.load.live import summarise
from loadgen.load.messages import CanaryDone
from loadgen.load.rescore import rescore_at_level
from loadgen.load.runstate import RunState
from loadgen.load.stages import Ticket
from loadgen.load.user_side import user_side

CANARY_USERS = 1  # Locust's fixed_count: exactly one of the shape's users is the canary user
_POLL_S = 0.005
_ENGINE_POLL_S = 0.05  # the held-level gate asks the engine's /metrics at most this often
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


def asked_to_stop(user: User) -> bool:
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
            if asked_to_stop(self):
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
                self.http, path, timeout_s=sweep.settle_timeout_s, stopping=partial(asked_to_stop, self)
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
        ids = [new_request_id() for _ in tickets]
        inflight_at_send = st.inflight.total
        st.inflight.canary += len(tickets)
        try:
            copies = send_burst(
                self.http,
                api_path(st.base_url, kind),
                kind,
                body,
                ids,
                max_tokens=canaries[0].max_tokens,
                tokens_as_ids=features.tokens_as_ids,
                secret=st.api_key,
            )
        finally:
            st.inflight.canary -= len(tickets)
        for ticket, canary, (_, one_body), request_id, one in zip(tickets, canaries, sent, ids, copies, strict=True):
            record = canary_record(
                one,
                request_id=request_id,
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
        if copies[0].cancelled:
            raise gevent.GreenletExit

    def _recorded(self, st: RunState, ticket: Ticket, record: CanaryRecord, out: Outcome) -> None:
        """A canary's record to the collector, its request to Locust's statistics, its summary to the coordinator."""
        self.environment.events.canary_record.fire(record=record)
        _fire_stats(self.environment, f"canary:{record.canary_id}", out)
        assert self.environment.runner is not None
        self.environment.runner.send_message("lg_done", done_summary(st, ticket, record).to_msg())

    def _send(
        self, st: RunState, ticket: Ticket, http: Any, *, burst: bool = False, burst_reset: ResetAnswer | None = None
    ) -> None:
        canary = st.scenario.canaries[ticket.canary_index]
        features = st.canary_body_features(ticket.canary_index)
        busy = burst or ticket.level > 0 or st.inflight.total > 0
        gone = partial(_gone, self, st, ticket)
        flush = None if st.flusher is None else partial(st.flusher, http, st.scenario.canary_kind(canary), gone)
        step = prepare_cache(http, canary, st.scenario.endpoint.cache_reset_path, busy=busy, flush=flush)
        if burst_reset is not None and step.action is None:  # the burst's one reset, made before any copy went out
            step = CacheStep("reset", burst_reset)
        kind, body = canary_body(st.scenario, canary, model=st.model, features=features, salt=step.action == "salt")
        gate = st.phase_gate if st.phase_gate.aimed and ticket.phase == "sweep" and ticket.level and not burst else None
        if gate is not None:  # background aimed at one phase of this canary (loadgen.load.phase)
            held: bool | None = gate.before_canary(
                ticket.level,
                alive=lambda: st.holding.slots,
                in_flight=lambda: st.inflight.background,
                timeout_s=st.scenario.sweep.settle_timeout_s,
                stopping=gone,
            )
        else:
            held = None if burst else _wait_held(st, ticket.level, stopping=gone)
        if not burst and gone():
            return  # stopped, or the level ended, while it was being reached: a canary sent now would not share it
        background_held = _held_slots(st)
        spec = st.scenario.background
        loaded = not burst and ticket.level > 0  # a sweep canary beside background: its level has a side
        buffered = st.buffering.seen if loaded and spec.stream else None
        bound = level_bound(spec.stream, st.buffering.seen, spec.handover_s, spec.wait_s) if loaded else None
        request_id = new_request_id()
        inflight_at_send = st.inflight.total
        st.inflight.canary += 1
        try:
            out, choices = send_choices(
                http,
                api_path(st.base_url, kind),
                kind,
                body,
                request_id,
                tokens_as_ids=features.tokens_as_ids,
                secret=st.api_key,
                progress=None if gate is None else gate.canary_tokens,
            )
        finally:
            st.inflight.canary -= 1
            if gate is not None:
                gate.canary_ended()
        record = canary_record(
            out,
            request_id=request_id,
            run_id=st.run_dir.name,
            canary=canary,
            kind=kind,
            body=body,
            phase=ticket.phase,
            level=ticket.level,
            inflight_at_send=inflight_at_send,
            worker=st.worker,
            cache_action=step.action,
            cache_reset=step.reset,
            flush_tokens=step.flush_tokens,
            burst=burst,
            held_at_send=held,
            background_held_at_send=None if burst else background_held,
            background_buffered=buffered,
            level_bound=bound,
            background_phase=spec.phase if ticket.phase == "sweep" and not burst else None,
        )
        first, *others = choice_records(record, choices)
        if canary.rescore and not burst and ticket.phase != "warmup" and st.rescores is not None:
            st.rescores.write(rescore_at_level(st, http, first, out.completion, canary.top_logprobs))  # level holds
        for one in others:  # n > 1: each further choice's record (one request, counted once by the coordinator)
            self.environment.events.canary_record.fire(record=one)
        self._recorded(st, ticket, first, out)
        if out.cancelled:
            raise gevent.GreenletExit


def _gone(user: User, st: RunState, ticket: Ticket) -> bool:
    """The canary user was asked to stop, or the stage of its ticket is over (its background failed for good)."""
    return asked_to_stop(user) or st.mirror.moved_on(ticket)


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


def _level_held(st: RunState, level: int) -> bool:
    h = st.holding
    if not st.distributed:
        return h.slots == level and h.held >= level
    snap = st.mirror.snapshot
    return h.all_held and snap is not None and snap.held


def _held_slots(st: RunState) -> int:
    """Background slots of the level holding a started request now: this process's, or in a distributed run every
    worker's as the coordinator last heard (``StageSnapshot.held_slots``), this process's own count refreshed."""
    own = st.holding.held
    snap = st.mirror.snapshot
    if not st.distributed or snap is None:
        return own
    return max(snap.held_slots, own)


def done_summary(st: RunState, ticket: Ticket, record: CanaryRecord) -> CanaryDone:
    """A canary completion as the coordinator needs it (``lg_done``): counters and hashes."""
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
