"""One Locust process's view of a run: the plan read back from the manifest, live counters, collectors.

Why: the shape, the canary user and the background users must agree on the stage, the model, the
dialect and where records go. This module holds that shared state; it imports no Locust (the
locustfile wires it to Locust's events), so it can be built and inspected in tests.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectors.canary import BackgroundCollector, CanaryCollector
from collectors.manifest import read_manifest
from loadgen.client import Inflight
from loadgen.dialects import Features
from loadgen.errors import RunFolderError
from loadgen.prepare import api_key_of, canary_features
from loadgen.scenario import Scenario, parse_scenario
from loadgen.stages import StageTracker, build_stages


@dataclass
class RunState:
    run_dir: Path
    scenario: Scenario
    base_url: str
    model: str
    api_key: str | None
    features: dict[str, Features]  # per endpoint kind, as probed
    tracker: StageTracker
    canaries: CanaryCollector
    background: BackgroundCollector
    worker: str
    inflight: Inflight = field(default_factory=Inflight)
    background_users: int = 0
    owns_report: bool = False  # True when this process prepared the run folder (web UI) and must report it
    _next_user_index: int = 0

    def next_user_index(self) -> int:
        self._next_user_index += 1
        return self._next_user_index - 1

    def canary_body_features(self, index: int) -> Features:
        canary = self.scenario.canaries[index]
        return canary_features(self.features[self.scenario.canary_kind(canary)], canary)

    def close(self) -> None:
        self.canaries.close()
        self.background.close()


def _features(raw: dict[str, Any], run_dir: Path) -> dict[str, Features]:
    try:
        return {kind: Features(**entry["features"]) for kind, entry in raw.items()}
    except (TypeError, KeyError) as exc:
        raise RunFolderError(
            f"{run_dir}/manifest.json: field features: not as 'loadgen run' writes it ({exc})"
        ) from None


def load_state(run_dir: Path, *, worker: str = "") -> RunState:
    """Rebuild the plan from a prepared run folder and open this process's record files."""
    manifest = read_manifest(run_dir)
    source = f"{run_dir}/manifest.json"
    scenario = parse_scenario(manifest["scenario"], source)
    base_url = manifest["endpoint"]["base_url"]
    stages = build_stages(scenario.sweep, len(scenario.canaries))
    suffix = f"-{worker}" if worker else ""
    return RunState(
        run_dir=run_dir,
        scenario=scenario,
        base_url=base_url,
        model=manifest["endpoint"]["model"],
        api_key=api_key_of(scenario, source),
        features=_features(manifest["features"], run_dir),
        tracker=StageTracker(stages, len(scenario.canaries), scenario.sweep.settle_timeout_s),
        canaries=CanaryCollector(run_dir / f"canaries{suffix}.jsonl"),
        background=BackgroundCollector(run_dir / f"background{suffix}.jsonl"),
        worker=worker or f"pid{os.getpid()}",
    )
