"""``loadgen.core.prepared``: the prepared run's plan read once from a manifest, typed, odd values read as absent."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.core.manifest import Manifest
from loadgen.core.prepared import PreparedRun
from loadgen.core.scenario import Server


def manifest(scenario: dict[str, Any], per_level: int | None = 3) -> Manifest:
    return Manifest.model_validate({"schema": 1, "canaries_per_level": per_level, "scenario": scenario})


def test_a_prefill_decode_plan() -> None:
    servers = [
        {"name": "p", "role": "prefill", "base_url": "http://127.0.0.1:8100"},
        {"name": "d", "role": "decode", "base_url": "http://127.0.0.1:8200", "metrics_url": ""},
    ]
    got = PreparedRun.of(
        manifest(
            {
                "canaries": [{"id": "a"}, {"id": "b"}],
                "endpoint": {"servers": servers, "metrics_interval_s": 0.2},
                "sweep": {"claim_max_rate": 0.05},
                "background": {"side": "prefill"},
            }
        )
    )
    assert got == PreparedRun(
        servers=tuple(Server.model_validate(s) for s in servers),
        level_quota=6,  # 3 per level and canary, two canaries round-robin
        claim_max_rate=0.05,
        metrics_interval_s=0.2,
        loaded_side="prefill",
    )


@pytest.mark.parametrize(
    "scenario",
    [
        {},
        {"endpoint": {"servers": [{"name": "x"}], "metrics_interval_s": True}, "sweep": {"claim_max_rate": 1}},
        {"endpoint": {"metrics_interval_s": -1.0}, "sweep": {"claim_max_rate": 0}, "background": {"side": "both"}},
    ],
)
def test_what_a_plan_does_not_say_reads_as_absent(scenario: dict[str, Any]) -> None:
    got = PreparedRun.of(manifest(scenario, per_level=None))
    assert got == PreparedRun((), None, None, None, "decode")  # no side named: the decode side is loaded


def test_one_canary_is_counted_without_a_list() -> None:
    assert PreparedRun.of(manifest({"canaries": []}, per_level=4)).level_quota == 4
