"""Does the endpoint say how large its GPU prefix cache is, where a canary's offload action needs it? Asked once,
before any traffic.

Why: ``cache = "offload"`` under load (or where the GPU-only reset is refused) flushes the GPU prefix cache with
filler prompts until their tokens total 1.25 times its size (docs/design.md, "Cache actions"); a size guessed would
flush too little (the canary's blocks stay on the GPU: no offload hit to measure) or far too much. The size is the
one the probe read from ``/metrics`` (``vllm:cache_config_info``), kept in the manifest, so every process of the run
and a cold-boot study read the same number.

Pure: the scenario and what the probe kept in, an ``EndpointError`` naming the label and the endpoint out.
"""

from __future__ import annotations

from loadgen.core.errors import EndpointError
from loadgen.core.scenario import Scenario
from loadgen.core.wire.server_config import CACHE_INFO, gpu_cache_tokens


def check_cache_size(scenario: Scenario, info: dict[str, dict[str, str]], metrics_url: str) -> int | None:
    """The GPU cache's size in tokens where a canary has ``cache = "offload"`` (None where none has); refused
    when ``info`` (the ``*_info`` series of ``metrics_url``) does not state it."""
    offload = [c.id for c in scenario.canaries if c.cache == "offload"]
    if not offload:
        return None
    tokens = gpu_cache_tokens(info)
    if tokens is None:
        raise EndpointError(
            f'{metrics_url}: canary {offload[0]!r} has cache = "offload", which flushes the GPU prefix cache by '
            f"its size, but the endpoint's {CACHE_INFO} states no num_gpu_blocks and block_size labels (vLLM and "
            'the embedded engine state them); use cache = "reset" or "miss" on this endpoint'
        )
    return tokens
