"""One user-side process's view of a run: the plan, live counters, the stage mirror, its collectors.

Why: the canary user and the background users must agree on the model, the dialect, the stage and
where records go. The plan travels as a small plain dict (the master sends it to workers, a local
run loops it back), so a worker on another machine needs nothing but the message. This module
imports no Locust; the locustfile wires it to Locust's events and messages.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from collectors.canary import BackgroundCollector, CanaryCollector
from collectors.rescores import RescoreCollector
from loadgen.core.errors import RunFolderError
from loadgen.core.manifest import read_manifest
from loadgen.core.scenario import Scenario, parse_scenario
from loadgen.core.scenario.phase import parse_phase
from loadgen.core.wire import Features
from loadgen.load.client import Inflight
from loadgen.load.coordination import Mirror
from loadgen.load.engine_check import EngineCheck
from loadgen.load.failing import BackgroundFailures
from loadgen.load.flush import Flusher, flush_facts, flusher_for
from loadgen.load.holding import Buffering, Holding
from loadgen.load.live import References
from loadgen.load.phase import PhaseGate
from loadgen.runs.prepare import api_key_of, canary_features


@dataclass
class RunState:
    run_dir: Path
    scenario: Scenario
    base_url: str
    model: str
    api_key: str | None
    features: dict[str, Features]  # per endpoint kind, as probed
    mirror: Mirror
    canaries: CanaryCollector
    background: BackgroundCollector
    worker: str
    rescores: RescoreCollector | None = None  # the re-scores sent at level (loadgen.load.rescore), opened at the first
    inflight: Inflight = field(default_factory=Inflight)
    holding: Holding = field(default_factory=Holding)
    buffering: Buffering = field(default_factory=Buffering)  # streamed background seen coming in one piece
    failures: BackgroundFailures = field(default_factory=BackgroundFailures)  # per sweep stage, for its stop
    backoff_said: bool = False  # the notice that background slots pause after failures was given
    distributed: bool = False  # a Locust worker: other workers hold part of the level
    flusher: Flusher | None = None  # the offload canaries' flush (loadgen.load.flush); None: the run has none
    engine: EngineCheck = field(init=False)  # the engine's own running count (the loaded side's), to confirm a level
    phase_gate: PhaseGate = field(init=False)  # background aimed at one phase of the canary (background.phase)

    def __post_init__(self) -> None:
        self.engine = EngineCheck.for_run(self.scenario, self.base_url, self.api_key)
        self.phase_gate = PhaseGate(parse_phase(self.scenario.background.phase))

    references: References = field(default_factory=dict)  # canary id -> kind -> reference identity, once chosen
    _next_user_index: int = 0

    def next_user_index(self) -> int:
        """0, 1, 2... in a local run (reproducible bodies and delays); on a worker, offset by its name, so
        users of different workers neither send the same bodies nor start in step."""
        self._next_user_index += 1
        offset = int(hashlib.blake2b(self.worker.encode(), digest_size=4).hexdigest(), 16) if self.distributed else 0
        return offset * 4096 + self._next_user_index - 1

    def canary_body_features(self, index: int) -> Features:
        canary = self.scenario.canaries[index]
        return canary_features(self.features[self.scenario.canary_kind(canary)], canary)

    def close(self) -> None:
        self.canaries.close()
        self.background.close()
        if self.rescores is not None:
            self.rescores.close()


@dataclass(frozen=True)
class Plan:
    """The part of a prepared run that user-side processes need; travels as a small msgpack-safe message."""

    run_dir: str
    run_id: str
    scenario: dict[str, Any]  # the resolved scenario, as the manifest holds it
    base_url: str
    model: str
    features: dict[str, Any]  # per endpoint kind, as the manifest holds it
    # what an offload canary's flush needs (loadgen.load.flush.FlushSize), as the probe read them; None: not stated
    gpu_cache_tokens: int | None = None
    max_model_len: int | None = None

    @classmethod
    def of(cls, run_dir: Path) -> Plan:
        m = read_manifest(run_dir)
        where = f"{run_dir}/manifest.json"
        if m.run_id is None or m.endpoint.base_url is None or m.endpoint.model is None:
            raise RunFolderError(f"{where}: not a prepared run (run_id, endpoint.base_url and endpoint.model needed)")
        cache, context = flush_facts(m)
        return cls(
            str(run_dir), m.run_id, dict(m.scenario), m.endpoint.base_url, m.endpoint.model, m.features, cache, context
        )

    def to_msg(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_msg(cls, data: dict[str, Any]) -> Plan:
        return cls(**data)


def _features(raw: dict[str, Any], where: str) -> dict[str, Features]:
    try:
        return {kind: Features(**entry["features"]) for kind, entry in raw.items()}
    except (TypeError, KeyError) as exc:
        raise RunFolderError(f"{where}: field features: not as 'loadgen run' writes it ({exc})") from None


def state_from_plan(plan: Plan, *, worker: str) -> RunState:
    """Open this process's record files in the run folder (created if this machine lacks it)."""
    run_dir = Path(plan.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    where = f"{run_dir}/manifest.json"
    scenario = parse_scenario(plan.scenario, where)
    suffix = f"-{worker}" if worker else ""
    return RunState(
        run_dir=run_dir,
        scenario=scenario,
        base_url=plan.base_url,
        model=plan.model,
        api_key=api_key_of(scenario, where),
        features=_features(plan.features, where),
        mirror=Mirror(
            len(scenario.canaries),
            burst_mix_seed=scenario.background.seed if scenario.sweep.burst_mix == "random" else None,
        ),
        canaries=CanaryCollector(run_dir / f"canaries{suffix}.jsonl"),
        background=BackgroundCollector(run_dir / f"background{suffix}.jsonl"),
        rescores=RescoreCollector(run_dir / f"rescores{suffix}.jsonl"),
        worker=worker or f"pid{os.getpid()}",
        distributed=bool(worker),
        flusher=flusher_for(scenario, plan.base_url, plan.model, (plan.gpu_cache_tokens, plan.max_model_len)),
    )
