"""The Locust side of a run: a canary user, background users, and the load shape that steps the levels.

Run it through ``loadgen run`` (headless or ``--ui``) or as ``locust -f`` on this file. Importing it
imports Locust and so gevent's monkey-patching: nothing in ``reports`` may import it. Users are thin:
stage arithmetic lives in ``loadgen.stages``, request/timing/fault handling in ``loadgen.client``,
dialects in ``loadgen.dialects``, writing in ``collectors``.
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from typing import Any

import gevent
import locust
from locust import LoadTestShape, User, constant, events, task
from locust.env import Environment
from locust.event import EventHook

from collectors.manifest import now_iso, read_manifest, update_manifest
from collectors.record import CanaryRecord
from loadgen.background import BackgroundPrompts
from loadgen.client import Outcome, api_path, make_client, send
from loadgen.dialects import Features, build_body
from loadgen.errors import LoadgenError
from loadgen.options import add_arguments, normalise
from loadgen.prepare import prepare_run
from loadgen.runstate import RunState, load_state
from loadgen.scenario import load_scenario, with_overrides
from loadgen.stages import Ticket, users_for
from scenarios import path_of

log = logging.getLogger("loadgen")
_STATE: RunState | None = None
_CANARY_USERS = 1
_POLL_S = 0.005
_NO_FEATURES = Features(
    return_token_ids=False, logprobs=False, top_logprobs=0, tokens_as_ids=False, include_usage=False
)

assert locust  # imported for its monkey-patching side effect


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    add_arguments(parser)


@events.init.add_listener
def _hooks(environment: Environment, **_: Any) -> None:
    environment.events.canary_record = EventHook()  # type: ignore[attr-defined]
    environment.events.background_request = EventHook()  # type: ignore[attr-defined]


def _prepare(environment: Environment) -> tuple[Path, bool]:
    """The run folder, and whether this process owns its report: ``loadgen run`` prepared it (headless),
    or this process prepares a new one per start (web UI, plain ``locust -f``) and reports it at the end."""
    opts = normalise(environment.parsed_options)
    if opts.run_dir and read_manifest(Path(opts.run_dir)).get("status") == "prepared":
        return Path(opts.run_dir), False
    source = str(path_of(opts.scenario))
    scenario = with_overrides(
        load_scenario(Path(source)),
        base_url=opts.host or environment.host or None,
        levels=opts.levels,
        canaries_per_level=opts.canaries_per_level,
        labels=opts.labels,
    )
    return prepare_run(scenario, source=source, out_dir=Path(opts.out_dir)), True


def state(environment: Environment) -> RunState:
    """The run's state, prepared on first use (the shape's first tick comes before ``test_start``)."""
    global _STATE
    if _STATE is None:
        run_dir, owns_report = _prepare(environment)
        st = load_state(run_dir)
        st.owns_report = owns_report
        st.canaries.register(environment.events.canary_record)  # type: ignore[attr-defined]
        st.background.register(environment.events.background_request)  # type: ignore[attr-defined]
        update_manifest(run_dir, status="running", workers=[st.worker])
        environment.host = st.base_url
        _STATE = st
        log.info("run folder: %s", run_dir)
    return _STATE


@events.test_stop.add_listener
def _finish(environment: Environment, **_: Any) -> None:
    global _STATE
    st, _STATE = _STATE, None
    if st is None:
        return
    st.close()
    status = "finished" if st.tracker.finished else "interrupted"
    update_manifest(
        st.run_dir,
        status=status,
        finished=now_iso(),
        counts={
            "canaries_written": st.canaries.writer.written,
            "canary_write_failures": st.canaries.writer.failures,
            "background_written": st.background.writer.written,
        },
        unsettled_levels=st.tracker.unsettled_levels,
    )
    if st.owns_report:
        try:
            from reports import write_reports

            write_reports(st.run_dir)
            log.info("report: %s", st.run_dir / "report.html")
        except LoadgenError as exc:
            log.error("report for %s failed: %s", st.run_dir, exc)


def _fire_stats(environment: Environment, name: str, out: Outcome) -> None:
    environment.events.request.fire(
        request_type="POST",
        name=name,
        response_time=(out.latency_s or 0.0) * 1000.0,
        response_length=out.response_bytes,
        context={},
        exception=None if out.ok else RuntimeError(f"{out.error_kind}: {out.error_message}"),
    )


class CanaryUser(User):
    """Sends the scenario's canaries one at a time, only when the current stage says so."""

    fixed_count = _CANARY_USERS
    wait_time = constant(0)

    def on_start(self) -> None:
        st = state(self.environment)
        ep = st.scenario.endpoint
        self.http = make_client(
            st.base_url, connect_timeout_s=ep.connect_timeout_s, read_timeout_s=ep.read_timeout_s, api_key=st.api_key
        )

    def on_stop(self) -> None:
        self.http.close()

    @task
    def canary(self) -> None:
        st = state(self.environment)
        ticket = None
        while ticket is None:
            if st.tracker.finished:
                gevent.sleep(0.2)
                return
            st.tracker.check_ready(time.monotonic(), st.background_users, st.inflight.background)
            ticket = st.tracker.take_ticket()
            if ticket is None:
                gevent.sleep(_POLL_S)
        self._send(st, ticket)
        if st.scenario.sweep.canary_pace_s:
            gevent.sleep(st.scenario.sweep.canary_pace_s)

    def _send(self, st: RunState, ticket: Ticket) -> None:
        canary = st.scenario.canaries[ticket.canary_index]
        kind = st.scenario.canary_kind(canary)
        features = st.canary_body_features(ticket.canary_index)
        messages = None
        if kind == "chat":
            messages = (
                [m.model_dump() for m in canary.messages]
                if canary.messages
                else [{"role": "user", "content": canary.prompt or ""}]
            )
        body = build_body(
            kind,
            model=st.model,
            prompt=canary.prompt if kind == "completions" else None,
            messages=messages,
            max_tokens=canary.max_tokens,
            seed=canary.seed,
            stream=canary.stream,
            features=features,
        )
        inflight_at_send = st.inflight.total
        st.inflight.canary += 1
        try:
            out = send(self.http, api_path(st.base_url, kind), kind, body, tokens_as_ids=features.tokens_as_ids)
        finally:
            st.inflight.canary -= 1
        c = out.completion
        record = CanaryRecord(
            run_id=st.run_dir.name,
            canary_id=canary.id,
            request_id=uuid.uuid4().hex,
            phase=ticket.phase,
            level=ticket.level,
            inflight_at_send=inflight_at_send,
            sent_at=out.sent_at,
            status="ok" if out.ok else "error",
            latency_s=out.latency_s,
            ttft_s=out.ttft_s,
            error_kind=out.error_kind,
            error_message=out.error_message,
            http_status=out.http_status,
            endpoint=kind,
            stream=canary.stream,
            request=body,
            worker=st.worker,
            token_ids=c.token_ids if c else None,
            tokens=c.tokens if c else None,
            logprobs=c.logprobs if c else None,
            top_logprobs=c.top_logprobs if c else None,
            text=c.text if c else None,
            finish_reason=c.finish_reason if c else None,
            usage=c.usage if c else None,
        )
        self.environment.events.canary_record.fire(record=record)
        _fire_stats(self.environment, f"canary:{canary.id}", out)
        st.tracker.complete(ticket)
        if out.cancelled:
            raise gevent.GreenletExit


class BackgroundUser(User):
    """Keeps one varied request in flight (no wait by default) to shape the engine's batch."""

    wait_time = constant(0)

    def on_start(self) -> None:
        st = state(self.environment)
        ep = st.scenario.endpoint
        self.http = make_client(
            st.base_url, connect_timeout_s=ep.connect_timeout_s, read_timeout_s=ep.read_timeout_s, api_key=st.api_key
        )
        self.prompts = BackgroundPrompts(st.scenario.background, st.next_user_index())
        self.kind = st.scenario.background.kind or st.scenario.endpoint.kind
        self.path = api_path(st.base_url, self.kind)
        st.background_users += 1

    def on_stop(self) -> None:
        if _STATE is not None:
            _STATE.background_users -= 1
        self.http.close()

    @task
    def background(self) -> None:
        st = state(self.environment)
        spec = st.scenario.background
        req = self.prompts.next()
        messages = [{"role": "user", "content": req.prompt}] if self.kind == "chat" else None
        body = build_body(
            self.kind,
            model=st.model,
            prompt=None if messages else req.prompt,
            messages=messages,
            max_tokens=req.max_tokens,
            seed=None,
            stream=spec.stream,
            features=_NO_FEATURES,
        )
        stage = st.tracker.current  # None once the last canary is in: background drains until the shape stops
        level = stage.level if stage else None
        st.inflight.background += 1
        try:
            out = send(self.http, self.path, self.kind, body)
        finally:
            st.inflight.background -= 1
        usage = (out.completion.usage if out.completion else None) or {}
        self.environment.events.background_request.fire(
            row={
                "level": level,
                "phase": stage.phase if stage else "drain",
                "sent_at": out.sent_at,
                "latency_s": out.latency_s,
                "ttft_s": out.ttft_s,
                "status": "ok" if out.ok else "error",
                "error_kind": out.error_kind,
                "http_status": out.http_status,
                "shared_prefix": req.shared_prefix,
                "prompt_tokens": usage.get("prompt_tokens"),
                "completion_tokens": usage.get("completion_tokens"),
            }
        )
        _fire_stats(self.environment, "background", out)
        if out.cancelled:
            raise gevent.GreenletExit
        if spec.wait_s:
            gevent.sleep(spec.wait_s)


class LevelShape(LoadTestShape):
    """Holds ``level`` background users plus the canary user; stops when the last stage's quota is met."""

    use_common_options = False

    def tick(self) -> tuple[int, float, list[type[User]]] | None:
        env = self.runner.environment if self.runner else None
        if env is None:
            return None
        try:
            st = state(env)
        except LoadgenError as exc:
            log.error("%s", exc)
            return None
        users = users_for(st.tracker.current, _CANARY_USERS)
        if users is None:
            return None
        return users, st.scenario.sweep.spawn_rate, [CanaryUser, BackgroundUser]
