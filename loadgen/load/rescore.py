"""One re-score sent and recorded: a canary completion's prompt ids plus output ids back, teacher-forced.

Why: the re-score check (docs/design.md, "The re-score check") is sent at the canary's level by the canary user,
right after its canary and while the level's background still runs, and alone by the run's owner once the load
has ended (``loadgen.load.rescore_alone``); both make the same request and the same record here. The body and
the reading of the answer are ``loadgen.core.wire.rescore``'s; the request goes through
``loadgen.load.client.send_rescore`` with its own ``X-Request-Id``. Never raises for endpoint faults: a fault, or
an answer with nothing usable, is a record with ``status: "error"`` and its kind.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from loadgen.core.record import CanaryRecord
from loadgen.core.rescore_record import RescoreMode, RescoreRecord
from loadgen.core.wire import Completion, Kind
from loadgen.core.wire.rescore import RescoreFault, parse_rescore, rescore_body
from loadgen.core.wire.urls import api_path
from loadgen.load.canary_request import new_request_id
from loadgen.load.client import EndpointClient, send_rescore
from loadgen.load.runstate import RunState


@dataclass(frozen=True)
class Target:
    """Where a re-score goes and how its answer reads: the run's endpoint, model and key, and whether the
    canary's token strings were vLLM's ``token_id:N``."""

    base_url: str
    model: str
    api_key: str | None
    tokens_as_ids: bool
    worker: str


def at_level_subject(record: CanaryRecord, completion: Completion | None, top_k: int) -> RescoreRecord:
    """The re-score a canary's completion asks for, not yet sent (``sent_at`` 0, status ``ok``); a record with
    the fault already set where the answer gives nothing to send back or to compare with."""
    subject = RescoreRecord(
        run_id=record.run_id,
        canary_id=record.canary_id,
        canary_request_id=record.request_id,
        request_id="",
        mode="at_level",
        phase=record.phase,
        level=record.level,
        sent_at=0.0,
        status="ok",
        endpoint=record.endpoint,
        prompt_ids=None if completion is None else completion.prompt_token_ids,
        output_ids=record.token_ids,
        decode_logprobs=record.logprobs,
        decode_top=record.top_logprobs,
        top_k=top_k,
        worker=record.worker,
    )
    if not record.token_ids or record.logprobs is None:
        return _fault(subject, RescoreFault("no_decode_logprobs", "the canary's answer had no output ids or logprobs"))
    if subject.prompt_ids is None:
        why = "the canary's answer carried no prompt token ids (vLLM: `prompt_token_ids` with `return_token_ids`)"
        return _fault(subject, RescoreFault("no_prompt_ids", why))
    return subject


def send(
    client: EndpointClient, target: Target, subject: RescoreRecord, mode: RescoreMode, request_id: str
) -> RescoreRecord:
    """Send ``subject``'s ids (``at_level_subject``'s record, or one the alone pass copies) as ``mode`` and
    record what came back."""
    assert subject.prompt_ids is not None and subject.output_ids is not None
    kind: Kind = "generate" if subject.endpoint == "generate" else "completions"
    body = rescore_body(
        kind, model=target.model, prompt_ids=subject.prompt_ids, output_ids=subject.output_ids, top_k=subject.top_k
    )
    sent_at = time.time()
    out = send_rescore(client, api_path(target.base_url, kind), kind, body, request_id, secret=target.api_key)
    done = replace(
        subject,
        request_id=request_id,
        mode=mode,
        sent_at=sent_at,
        latency_s=out.latency_s,
        http_status=out.http_status,
        worker=target.worker,
    )
    if not out.ok:
        done.status, done.error_kind, done.error_message = "error", out.error_kind, out.error_message
        return done
    assert out.body is not None
    got = parse_rescore(
        kind, out.body, prompt_ids=subject.prompt_ids, output_ids=subject.output_ids, tokens_as_ids=target.tokens_as_ids
    )
    if isinstance(got, RescoreFault):
        return _fault(done, got)
    done.logprobs, done.top_logprobs = got.logprobs, got.top_logprobs
    return done


def _fault(record: RescoreRecord, fault: RescoreFault) -> RescoreRecord:
    record.status, record.error_kind, record.error_message = "error", fault.kind, fault.message
    return record


def rescore_at_level(
    st: RunState, client: EndpointClient, record: CanaryRecord, completion: Completion | None, top_k: int
) -> RescoreRecord:
    """The canary user's re-score of the canary it just sent, before it reports the canary done (so its stage,
    and the level's background, still run): sent where the answer gave ids to send, recorded either way."""
    subject = at_level_subject(record, completion, top_k)
    if subject.status != "ok" or record.status != "ok":
        return subject
    tokens_as_ids = st.features[subject.endpoint].tokens_as_ids if subject.endpoint in st.features else False
    target = Target(st.base_url, st.model, st.api_key, tokens_as_ids, st.worker)
    return send(client, target, subject, "at_level", new_request_id())
