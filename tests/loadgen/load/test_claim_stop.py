"""The claim rule on the load side: a sweep level ends early once a divergence makes "rate < P at 95%"
impossible there (``coordination.claim_stop`` + ``StageTracker.end_early``), and the scenario override
raises canaries per level to what the claim needs."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.core.errors import ScenarioError
from loadgen.core.scenario import load_scenario, with_overrides
from loadgen.load.coordination import Coordinator, claim_stop
from loadgen.load.stages import EarlyEnd, Stage, StageTracker
from scenarios import path_of


def test_claim_stop_only_when_the_claim_cannot_hold() -> None:
    kw: dict[str, Any] = {"phase": "sweep", "level": 4, "canary": "c"}
    assert claim_stop(None, 9, diverged=1, **kw) is None  # no claim asked
    assert claim_stop(0.3, 9, diverged=0, **kw) is None
    assert claim_stop(0.3, 9, diverged=None, **kw) is None  # reference not known yet
    assert claim_stop(0.3, 9, phase="baseline", level=0, canary="c", diverged=1) is None
    stop = claim_stop(0.3, 9, diverged=1, **kw)
    assert stop is not None and stop.canary == "c" and stop.diverged == 1 and "level 4" in stop.reason
    assert claim_stop(0.3, 40, diverged=1, **kw) is None  # 39 clean ones could still outweigh it


def test_end_early_moves_on_and_records_why() -> None:
    stages = [Stage("baseline", 0, 2), Stage("sweep", 0, 9), Stage("sweep", 4, 9), Stage("sweep", 9, 9, burst=True)]
    coord = Coordinator(StageTracker(stages, 10.0))
    t = coord.tracker
    assert not t.end_early(0, EarlyEnd("c", 1, "x"))  # not a sweep stage
    coord.on_done(0, 0.0)
    coord.on_done(0, 0.0)
    coord.on_done(1, 0.0)
    coord.on_done(1, 0.0, EarlyEnd("c", 1, "diverged"))
    assert t.index == 2 and t.completed == 0
    assert t.ended_early == [
        {"level": 0, "completed": 2, "quota": 9, "canary": "c", "diverged": 1, "reason": "diverged"}
    ]
    coord.on_done(1, 0.0, EarlyEnd("c", 1, "late"))  # a late report for a closed stage changes nothing
    assert t.index == 2 and len(t.ended_early) == 1
    for _ in range(9):
        coord.on_done(2, 0.0)
    assert t.index == 3 and not t.end_early(3, EarlyEnd("c", 1, "burst"))  # a burst stage is never cut


def test_claim_override_raises_canaries_per_level() -> None:
    base = load_scenario(path_of("quickstart"))
    assert with_overrides(base, claim_max_rate=0.3, canaries_per_level=2).sweep.canaries_per_level == 9
    assert with_overrides(base, claim_max_rate=0.3, canaries_per_level=20).sweep.canaries_per_level == 20
    with pytest.raises(ScenarioError, match="--claim-max-rate"):
        with_overrides(base, claim_max_rate=1.5)
    data = base.model_dump(mode="python")
    data["sweep"].update(claim_max_rate=0.05, canaries_per_level=10)
    from loadgen.core.scenario import parse_scenario

    with pytest.raises(ScenarioError, match="needs 59 canaries per level"):
        parse_scenario(data, "s.toml")
