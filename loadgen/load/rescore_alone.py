"""The alone re-score pass: once the load has ended, each distinct canary completion re-scored once, nothing else
in flight.

Why: the at-level re-score (``loadgen.load.rescore``, sent beside the level's background) tells whether a
re-score under load gives the rollout's logprobs; the same ids re-scored with the engine otherwise idle tell
whether the difference comes from the load or from the re-score itself (a prefill path against a decode path).
The run's owner calls ``rescore_alone`` from ``loadgen.runs.lifecycle.OwnedRun.end`` (its ``before_reports``)
before the reports are written; it reads what the canary users recorded (``rescores[-<worker>].jsonl``: the ids
each completion holds, distinct by endpoint kind, prompt ids and output ids, the first completion's request id
its key) and writes ``rescores-alone.jsonl``. One request at a time on one connection, blocking, as
``loadgen.studies.coldboot`` sends its canaries. Returns the notices the run's manifest should carry; never
raises for endpoint faults.
"""

from __future__ import annotations

from pathlib import Path

from collectors.jsonl import iter_objects
from collectors.rescores import RescoreCollector
from loadgen.core.errors import LoadgenError
from loadgen.core.rescore_record import ALONE_FILE, RESCORE_FILE_GLOB, RescoreRecord
from loadgen.core.scenario import parse_scenario
from loadgen.load.canary_request import new_request_id
from loadgen.load.client import make_client
from loadgen.load.rescore import Target, send
from loadgen.load.runstate import Plan, _features
from loadgen.runs.prepare import api_key_of

_GIVE_UP_ON = ("connection", "timeout")  # the endpoint is gone: the rest would each wait as long


def distinct_subjects(run_dir: Path) -> list[RescoreRecord]:
    """The at-level records whose ids can be sent again, one per distinct (kind, prompt ids, output ids), the
    first written kept."""
    seen: dict[tuple[str, tuple[int, ...], tuple[int, ...]], RescoreRecord] = {}
    for path in sorted(run_dir.glob(RESCORE_FILE_GLOB)):
        if path.name == ALONE_FILE:
            continue
        for raw in iter_objects(path, []):
            record = RescoreRecord.from_dict(raw, where=path.name)
            if record.mode == "at_level" and record.prompt_ids and record.output_ids:
                seen.setdefault((record.endpoint, tuple(record.prompt_ids), tuple(record.output_ids)), record)
    return list(seen.values())


def rescore_alone(run_dir: Path) -> list[str]:
    """Re-score each distinct completion alone; the notices to record (none where no canary asked)."""
    try:
        subjects = distinct_subjects(run_dir)
        if not subjects:
            return []
        plan = Plan.of(run_dir)
        where = f"{run_dir}/manifest.json"
        scenario = parse_scenario(plan.scenario, where)
        features = _features(plan.features, where)
        api_key = api_key_of(scenario, where)
    except LoadgenError as exc:
        return [f"The alone re-score pass did not run: {exc}"]
    ep = scenario.endpoint
    client = make_client(
        plan.base_url,
        connect_timeout_s=ep.connect_timeout_s,
        read_timeout_s=ep.read_timeout_s,
        api_key=api_key,
        request_timeout_s=ep.request_timeout_s,
        max_response_bytes=ep.max_response_bytes,
    )
    collector = RescoreCollector(run_dir / ALONE_FILE)
    notices = []
    try:
        for i, subject in enumerate(subjects):
            kind_features = features.get(subject.endpoint)
            target = Target(
                plan.base_url, plan.model, api_key, bool(kind_features and kind_features.tokens_as_ids), "owner"
            )
            done = send(client, target, subject, "alone", new_request_id())
            collector.write(done)
            if done.error_kind in _GIVE_UP_ON:
                notices.append(
                    f"The alone re-score pass stopped after {i + 1} of {len(subjects)} completions: "
                    f"{done.error_kind}: {done.error_message}"
                )
                break
    finally:
        client.close()
        collector.close()
    if collector.failures:
        notices.append(f"{collector.failures} alone re-score record(s) could not be written to {ALONE_FILE}")
    return notices
