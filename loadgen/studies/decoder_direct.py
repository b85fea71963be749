"""A matrix cell's decoder asked directly before and after prefill/decode traffic: what its prefix cache kept.

Why: a decode server keeps the blocks of the KV it received in its prefix cache, and a later request of
its own for the same prompt hits them: a cache its own prefill would never have made goes on serving
it after the disaggregated traffic has stopped. The study (docs/studies.md, "The decoder asked
directly") starts the cell's topology once and runs, in order, each a whole ``loadgen run``:

1. ``decoder-before``: the canaries straight to the decode server, level 0 (its own prefill: the run's
   endpoint is that one engine, no ``endpoint.servers``); then its prefix cache is reset, so that
   nothing of this phase is left in it;
2. ``pd``: the cell's sweep through the router (the decode server receives the prefill server's KV);
3. ``decoder-after``: the canaries straight to the decode server again, its cache as the sweep left it;
4. ``decoder-after-reset``: once more after a reset: the control, which should answer as phase 1.

The topology's logs span every phase, so they are kept in the cell's folder (beside the phases'
run folders), from the moment it started. Raises ``EngineError`` (the topology) and ``EndpointError``
(a reset the decode server refused); prints nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loadgen.core.errors import EndpointError
from loadgen.core.manifest import RunStatus
from loadgen.core.scenario import LauncherSpec, Scenario, TopologySpec
from loadgen.launchers.topology import RunningTopology
from loadgen.load.cache_reset import reset_cache
from loadgen.load.client import make_client
from loadgen.runs.prepare import api_key_of
from loadgen.studies.events import Progress
from loadgen.studies.run import RunResult, endpoint_for

BEFORE, SWEEP, AFTER, AFTER_RESET = "decoder-before", "pd", "decoder-after", "decoder-after-reset"
DIRECT = (BEFORE, AFTER, AFTER_RESET)  # the phases sent straight to the decode server


@dataclass
class Phase:
    name: str
    run_dir: Path
    status: RunStatus | None


# one ``loadgen run`` (keywords: host, servers, out_dir, phase, facts, levels: None for the sweep's) -> its result
RunPhase = Callable[..., RunResult]


def reset_decoder(url: str, scenario: Scenario, source: str) -> None:
    """POST the decode server's prefix-cache reset; an ``EndpointError`` naming it unless the cache was dropped."""
    ep = scenario.endpoint
    client = make_client(
        url, connect_timeout_s=ep.connect_timeout_s, read_timeout_s=30.0, api_key=api_key_of(scenario, source)
    )
    try:
        answer = reset_cache(client, ep.cache_reset_path)
    finally:
        client.close()
    if not answer.dropped:
        said = "no answer" if answer.status is None else f"HTTP {answer.status}"
        raise EndpointError(
            f"the decode server {url} did not drop its prefix cache on POST {ep.cache_reset_path} ({said}); the "
            "phases after it would not start from an empty cache (vLLM needs VLLM_SERVER_DEV_MODE=1)"
        )


def run_phases(
    scenario: Scenario,
    source: str,
    launcher: LauncherSpec | None,
    topology: TopologySpec,
    cell_out: Path,
    run_phase: RunPhase,
    progress: Progress,
) -> list[Phase]:
    """Start the cell's topology and run the four phases against it; the sweep's phase is named ``pd``."""
    phases: list[Phase] = []
    with endpoint_for(scenario, [], launcher, topology=topology, log_dir=cell_out, progress=progress) as got:
        resolved, started, facts = got
        assert isinstance(started, RunningTopology)
        started.move_logs(cell_out)
        decode = started.server("decode")
        for name in (BEFORE, SWEEP, AFTER, AFTER_RESET):
            if name == AFTER_RESET:
                reset_decoder(decode.url, scenario, source)
            if name == SWEEP:
                res = run_phase(
                    host=started.url, servers=resolved.endpoint.servers, out_dir=cell_out, phase=name, facts=facts
                )
            else:
                res = run_phase(
                    host=decode.url, servers=[], out_dir=cell_out / name, phase=name, facts=facts, levels=[0]
                )
            phases.append(Phase(name, res.run_dir, res.status))
            if name == BEFORE:
                reset_decoder(decode.url, scenario, source)
            if gone := started.exited():
                raise EndpointError(f"phase {name}: " + "; ".join(gone))
    return phases
