"""Prepare a run before any load: validate, resolve the endpoint, probe it, create the run folder.

Why: everything that can fail on bad input fails here, in the calling process, with a clear error
and before a single background request is sent (a request longer than the endpoint's context too:
``loadgen.runs.context``). Both ``loadgen run`` and a Locust process started
on its own (``locust -f``, web UI) go through this one function. No Locust imports.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from loadgen import __version__
from loadgen.core.errors import EndpointError, ScenarioError
from loadgen.core.manifest import (
    MANIFEST_SCHEMA,
    EngineStarted,
    Manifest,
    RunStatus,
    create_run_dir,
    host_info,
    now_iso,
    write_manifest,
)
from loadgen.core.scenario import Canary, Scenario
from loadgen.core.servers import behind_router
from loadgen.core.wire import Features, Kind
from loadgen.core.wire.urls import Routes
from loadgen.runs.cache_size import check_cache_size
from loadgen.runs.context import check_context, context_of
from loadgen.runs.probe import probe


def api_key_of(scenario: Scenario, source: str) -> str | None:
    name = scenario.endpoint.api_key_env
    if name is None:
        return None
    value = os.environ.get(name)
    if not value:
        raise ScenarioError(f"{source}: field endpoint.api_key_env: environment variable {name} is not set")
    return value


def wanted_features(scenario: Scenario) -> Features:
    top = max((max(c.top_logprobs, 1) for c in scenario.canaries if c.logprobs), default=0)
    return Features(
        return_token_ids=True,
        logprobs=any(c.logprobs for c in scenario.canaries),
        top_logprobs=top,
        tokens_as_ids=False,
        include_usage=True,
        batch_sizes=True,
    )


def canary_features(probed: Features, canary: Canary) -> Features:
    """What to ask for on one canary: what the endpoint accepted, narrowed to what the canary wants."""
    if not canary.logprobs:
        return replace(probed, logprobs=False, top_logprobs=0)
    # at least one alternative where the endpoint gives any: llama.cpp returns no logprobs (and so no ids) for 0
    return replace(probed, top_logprobs=min(probed.top_logprobs, max(canary.top_logprobs, 1)))


def endpoint_kinds(scenario: Scenario) -> set[Kind]:
    kinds = {scenario.canary_kind(c) for c in scenario.canaries}
    kinds.add(scenario.background.kind or scenario.endpoint.kind)
    return kinds


def prepare_run(
    scenario: Scenario, *, source: str, out_dir: Path, extra: EngineStarted | None = None
) -> tuple[Path, Manifest]:
    """Probe the endpoint, create a fresh run folder and write its manifest (status ``prepared``); returns the
    folder and that manifest, which its caller hands on (``OwnedRun.begin``) rather than read back."""
    base_url = scenario.endpoint.base_url
    if base_url is None:
        raise ScenarioError(f"{source}: field endpoint.base_url: no endpoint given (set it, or pass --host)")
    api_key = api_key_of(scenario, source)
    try:
        info = probe(
            base_url,
            model=scenario.endpoint.model,
            kinds=endpoint_kinds(scenario),
            wanted=wanted_features(scenario),
            api_key=api_key,
            timeout_s=min(scenario.endpoint.connect_timeout_s, 10.0),
            max_response_bytes=scenario.endpoint.max_response_bytes,
        )  # what it returns has the key redacted: a server may echo it into /version or /v1/models
    except EndpointError as exc:
        if not scenario.endpoint.servers:
            raise
        raise EndpointError(behind_router(str(exc), scenario.endpoint.servers)) from None
    check_context(scenario, context_of(info.models, info.model), base_url)  # before the run folder: no traffic
    check_cache_size(scenario, info.config.get("info_series", {}), Routes.of(base_url).root + "/metrics")
    run_dir = create_run_dir(out_dir, scenario.name)
    resolved = scenario.model_dump(mode="json")
    resolved["endpoint"]["model"] = info.model
    manifest = Manifest.model_validate(
        {
            "schema": MANIFEST_SCHEMA,
            "tool": {"name": "loadgen", "version": __version__},
            "run_id": run_dir.name,
            "scenario_path": source,
            "scenario": resolved,
            "endpoint": {
                "base_url": base_url,
                "kind": scenario.endpoint.kind,
                "model": info.model,
                "api_key_env": scenario.endpoint.api_key_env,
            },
            "server": {"models": info.models, "version": info.version, "config": info.config},
            "features": info.features_json(),
            "labels": dict(scenario.labels),
            "levels": list(scenario.sweep.levels),
            "canaries_per_level": scenario.sweep.canaries_per_level,
            "started": now_iso(),
            "status": RunStatus.PREPARED,
            "host": host_info(),
            "notices": list(info.notices),  # what of the server's answers was normalised to be kept
            **(extra or {}),
        }
    )
    write_manifest(run_dir, manifest)
    return run_dir, manifest
