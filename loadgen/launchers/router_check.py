"""Is the router a prefill/decode topology starts installed? Asked before any engine starts.

Why: the router runs as ``python -m vllm_router.launch_router`` (``loadgen.launchers.topology_commands``) from
this Python unless ``[topology.router] executable`` names another; when its package is missing, the router
fails only after the engines have started, and a matrix fails each of its P/D cells that way after running the
cells before them. This module looks the package up in this Python (it imports it: a package that cannot be
imported is as missing as one that is absent) and names the extra to install. It starts nothing and says
nothing of a router in another Python (an ``executable`` of the scenario's): that one fails at its start.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from loadgen.core.errors import EngineError
from loadgen.core.scenario import TopologySpec
from loadgen.launchers.topology_commands import ROUTER_MODULES

# how to install each router in this Python: the project's extra where it has one
INSTALL = {
    "vllm_router": "pip install 'batch-invariance-loadgen[pd]' (the vllm-router package)",
    "sglang_router": "pip install sglang-router",
}


def missing_router(kind: str, topology: TopologySpec | None) -> str | None:
    """The router package ``topology`` would start from this Python when it cannot be imported, else None (no
    topology, mode colocated, a kind without a router, or a router in another Python)."""
    if topology is None or topology.mode == "colocated" or topology.router.executable is not None:
        return None
    module = ROUTER_MODULES.get(kind)
    if module is None:
        return None
    package = module.split(".", 1)[0]
    try:
        importlib.import_module(package)
    except ImportError:
        return package
    return None


def require_router(kind: str, topology: TopologySpec | None, needed_by: Sequence[str] = ()) -> None:
    """Raise ``EngineError`` naming the package and how to install it where ``missing_router`` finds one missing;
    ``needed_by``: what needs it (a matrix's cell names), for the message."""
    package = missing_router(kind, topology)
    if package is None:
        return
    who = f"{', '.join(needed_by)} start" if needed_by else "the prefill/decode topology starts"
    raise EngineError(
        f"{who} the router {package}, which this Python cannot import: {INSTALL.get(package, 'install it')}"
    )


def require_routers(needs: Sequence[tuple[str, TopologySpec | None, str]]) -> None:
    """``require_router`` over several engines at once (a matrix's cells: engine kind, topology, cell name), before
    any of them starts; the message names every cell that needs the missing router."""
    missing = [(kind, topology, who) for kind, topology, who in needs if missing_router(kind, topology)]
    if missing:
        kind, topology, _ = missing[0]
        require_router(kind, topology, [who for k, _, who in missing if k == kind])
