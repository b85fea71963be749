"""The scenario schema, all of it: what one run, study or engine matrix is, validated before any traffic.

``schema`` holds the run itself (endpoint, canaries, background, sweep; a failure worded by ``messages``; the
sweep's bounds in ``limits``; the background's phase mode in ``phase``), ``loading`` reads it from a TOML file or
applies the command line's overrides;
``engines`` holds the sections that say how engines are started and compared (``[launcher]``,
``[cold_boot]``, ``[matrix]``); ``topology`` the endpoint as prefill and decode engines behind a router
(``[topology]``). Pydantic only: nothing here sends a request or starts a process.
"""

from loadgen.core.scenario.engines import (
    APPROVE_ENV,
    PORT_PLACEHOLDER,
    ColdBootSpec,
    LauncherSpec,
    MatrixCell,
    MatrixSpec,
    Side,
    TopologyMode,
)
from loadgen.core.scenario.loading import load_scenario, with_overrides
from loadgen.core.scenario.schema import (
    Background,
    Canary,
    Scenario,
    Server,
    Sweep,
    parse_scenario,
)
from loadgen.core.scenario.topology import RouterSpec, TopologySpec, check_topology

__all__ = [
    "APPROVE_ENV",
    "PORT_PLACEHOLDER",
    "Background",
    "Canary",
    "ColdBootSpec",
    "LauncherSpec",
    "MatrixCell",
    "MatrixSpec",
    "RouterSpec",
    "Scenario",
    "Server",
    "Side",
    "Sweep",
    "TopologyMode",
    "TopologySpec",
    "check_topology",
    "load_scenario",
    "parse_scenario",
    "with_overrides",
]
