"""A scenario from its TOML file, or with the command line's overrides applied: each validated by the schema.

Why apart: the schema (``loadgen.core.scenario.schema``) says what a scenario is; this module is how one comes
in, from a file (read, decoded, parsed: every failure names the file) or from a scenario and the options that
change it (re-validated, every failure names the option). Reads the file it is given; sends nothing.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import ValidationError

from loadgen.core.claims import canaries_needed
from loadgen.core.errors import ScenarioError
from loadgen.core.scenario.messages import describe
from loadgen.core.scenario.schema import Scenario, Server, parse_scenario


def load_scenario(path: Path) -> Scenario:
    """Read and validate a TOML scenario; every failure names ``path`` (and the field where one is at fault)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read scenario file ({exc.strerror or exc})") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not UTF-8 text; expected a TOML scenario") from None
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not valid TOML ({exc})") from None
    return parse_scenario(data, str(path))


def with_overrides(
    scenario: Scenario,
    *,
    base_url: str | None = None,
    api_key_env: str | None = None,
    levels: list[int] | None = None,
    canaries_per_level: int | None = None,
    labels: dict[str, str] | None = None,
    claim_max_rate: float | None = None,
    servers: list[Server] | None = None,
) -> Scenario:
    """Apply command-line overrides, re-validating so an override gets the same checks as the file.
    ``claim_max_rate`` also raises ``canaries_per_level`` to the canaries the claim needs, where fewer.
    ``servers``: the engines behind ``base_url`` (a topology the tool started), replacing the file's."""
    data = scenario.model_dump(mode="python")
    if base_url is not None:
        data["endpoint"]["base_url"] = base_url
    if api_key_env is not None:
        data["endpoint"]["api_key_env"] = api_key_env
    if servers is not None:
        data["endpoint"]["servers"] = [s.model_dump(mode="python") for s in servers]
    if levels is not None:
        data["sweep"]["levels"] = levels
    if canaries_per_level is not None:
        data["sweep"]["canaries_per_level"] = canaries_per_level
    if labels:
        data["labels"] = {**data["labels"], **labels}
    if claim_max_rate is not None:
        data["sweep"]["claim_max_rate"] = claim_max_rate
        if 0 < claim_max_rate < 1:
            need = canaries_needed(claim_max_rate)
            data["sweep"]["canaries_per_level"] = max(data["sweep"]["canaries_per_level"], need)
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(describe(exc, "command line", options=True)) from None
