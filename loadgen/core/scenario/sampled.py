"""Sampled canaries: the checks on their sampling fields and the canaries a ``seeds`` or ``routes`` set stands for.

Why apart: a sampled canary (temperature > 0) is a seed contract, not a greedy answer (docs/design.md, "Sampled
canaries and the seed contracts"); the rules that make it one (a seed, n's choices unstreamed, a seeds set of
distinct seeds) and the expansion of ``seeds`` and ``routes`` into one canary each are read by the scenario's
``Canary`` and ``Scenario`` and by nothing else. Pure: no pydantic import, no I/O; errors are plain sentences
the scenario's validators raise as ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar


class SampledFields(Protocol):
    """The fields of a canary these rules read (``loadgen.core.scenario.Canary``)."""

    @property
    def id(self) -> str: ...
    @property
    def temperature(self) -> float: ...
    @property
    def seed(self) -> int | None: ...
    @property
    def seeds(self) -> Sequence[int] | None: ...
    @property
    def n(self) -> int: ...
    @property
    def stream(self) -> bool: ...
    @property
    def kind(self) -> str | None: ...
    @property
    def routes(self) -> Sequence[str] | None: ...
    @property
    def messages(self) -> object: ...

    @property
    def model_fields_set(self) -> set[str]: ...

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Any: ...


C = TypeVar("C", bound=SampledFields)


def sampling_problem(c: SampledFields) -> str | None:
    """What makes the canary's sampling fields no contract, or None. An unseeded sample is refused: every
    completion may differ, so nothing about batch invariance could be read from it."""
    sampled = c.temperature > 0
    if c.seeds is not None:
        if "seed" in c.model_fields_set:
            return "give 'seed' or 'seeds', not both ('seeds' sends one canary per seed)"
        if len(c.seeds) < 2 or len(set(c.seeds)) != len(c.seeds):
            return f"'seeds' needs two or more distinct seeds, got {c.seeds}"
        if not sampled:
            return "'seeds' compares sampled completions: set temperature > 0 (a greedy answer ignores its seed)"
    elif sampled and c.seed is None:
        return (
            "a sampled canary (temperature > 0) needs a 'seed' (or 'seeds'): an unseeded sample may differ every "
            "time, so no completion could be compared"
        )
    if c.n > 1:
        if not sampled:
            return "n > 1 asks for distinct samples: set temperature > 0 (greedy choices are one answer n times)"
        if c.stream:
            return "n > 1 is sent unstreamed (each choice recorded apart): set stream = false"
    if c.routes is not None:
        if len(c.routes) < 2 or len(set(c.routes)) != len(c.routes):
            return f"'routes' needs two or more distinct routes, got {c.routes}"
        if c.kind is not None:
            return "give 'kind' or 'routes', not both ('routes' sends one canary per route)"
        if c.messages is not None and set(c.routes) - {"chat"}:
            return "'routes' other than chat take 'prompt', not 'messages' (chat sends the prompt as one user message)"
    if c.n > 1 and "generate" in ([c.kind] if c.kind else []) + list(c.routes or []):
        return "n > 1 is checked on completions and chat; SGLang's /generate answers n choices in its own shape"
    return None


def variant_id(base: str, route: str | None, seed: int | None) -> str:
    """The id of one canary of a ``routes``/``seeds`` set: ``base.route``, ``base.seedS``, ``base.route.seedS``."""
    parts = [base] + ([route] if route is not None else []) + ([f"seed{seed}"] if seed is not None else [])
    return ".".join(parts)


def expand(canaries: list[C]) -> list[C]:
    """Each canary with ``seeds`` or ``routes`` as one canary per route and seed (its ``family`` the id written),
    in the order written; the others as they are. An expanded canary has neither set, so a dumped scenario
    validates to the same list."""
    out: list[C] = []
    for c in canaries:
        if c.seeds is None and c.routes is None:
            out.append(c)
            continue
        routes: list[str | None] = list(c.routes) if c.routes is not None else [None]
        seeds: list[int | None] = list(c.seeds) if c.seeds is not None else [None]
        for route in routes:
            for seed in seeds:
                update: dict[str, Any] = {"id": variant_id(c.id, route, seed), "family": c.id}
                update |= {"seeds": None, "routes": None}
                if route is not None:
                    update["kind"] = route
                if seed is not None:
                    update["seed"] = seed
                out.append(c.model_copy(update=update))
    return out
