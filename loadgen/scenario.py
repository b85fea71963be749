"""Scenario files: validated data describing one run, loaded before any traffic is sent.

Why: a typo in a scenario must fail at once with the file and the field named, not after an hour of
load. This module reads TOML and validates; it sends nothing and imports nothing from Locust.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from loadgen.errors import ScenarioError

EndpointKind = Literal["completions", "chat"]
PositiveInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class Endpoint(_Strict):
    """Where to send requests. No ``base_url`` means: start the embedded engine."""

    base_url: str | None = None
    kind: EndpointKind = "completions"
    model: str | None = None  # read from /v1/models when omitted
    api_key_env: str | None = None  # the NAME of an environment variable; its value is never stored
    connect_timeout_s: float = Field(default=10.0, gt=0)
    read_timeout_s: float = Field(default=600.0, gt=0)  # long generations: not Locust's 60 s

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected an http(s) URL such as http://127.0.0.1:8000, got {v!r}")
        return v.rstrip("/")

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        if v is not None and not v.replace("_", "").isalnum():
            raise ValueError("expected the name of an environment variable (letters, digits, _), not a key")
        return v


class Message(_Strict):
    role: Literal["system", "user", "assistant"]
    content: str


class Canary(_Strict):
    """One fixed request. Sampling is always greedy: temperature 0, top_p 1, sent explicitly."""

    id: str = Field(default="canary", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    prompt: str | None = None
    messages: list[Message] | None = None
    kind: EndpointKind | None = None  # defaults to the endpoint's kind
    max_tokens: PositiveInt = 64
    seed: int | None = 0
    logprobs: bool = True
    top_logprobs: Annotated[int, Field(ge=0, le=20)] = 2
    stream: bool = False

    @model_validator(mode="after")
    def _one_input(self) -> Canary:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of 'prompt' or 'messages'")
        if self.messages is not None and not self.messages:
            raise ValueError("'messages' must not be empty")
        if self.kind == "completions" and self.messages is not None:
            raise ValueError("a completions canary needs 'prompt', not 'messages'")
        return self


class Background(_Strict):
    """Traffic that exists to shape the engine's batch; never analysed for determinism."""

    seed: int = 1
    prompt_words: tuple[PositiveInt, PositiveInt] = (8, 200)
    max_tokens: tuple[PositiveInt, PositiveInt] = (16, 128)
    shared_prefix_share: float = Field(default=0.0, ge=0.0, le=1.0)
    shared_prefix_words: NonNegInt = 48
    stream: bool = True
    kind: EndpointKind | None = None
    wait_s: float = Field(default=0.0, ge=0.0)  # pause between a user's requests; 0 keeps one in flight

    @field_validator("prompt_words", "max_tokens")
    @classmethod
    def _ordered(cls, v: tuple[int, int]) -> tuple[int, int]:
        if v[0] > v[1]:
            raise ValueError(f"expected [low, high] with low <= high, got {list(v)}")
        return v


class Sweep(_Strict):
    levels: list[NonNegInt] = Field(default=[0, 1, 2, 4, 8], min_length=1)
    canaries_per_level: PositiveInt = 10
    warmup: NonNegInt = 1
    baseline: NonNegInt = 5
    canary_pace_s: float = Field(default=0.0, ge=0.0)  # 0: back to back
    spawn_rate: float = Field(default=100.0, gt=0)
    settle_timeout_s: float = Field(default=10.0, gt=0)  # longest wait for a level's users to be in flight

    @field_validator("levels")
    @classmethod
    def _unique(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"levels must be distinct, got {v}")
        return v


class Scenario(_Strict):
    name: str = Field(default="scenario", min_length=1)
    description: str = ""
    endpoint: Endpoint = Endpoint()
    canaries: list[Canary] = Field(min_length=1)
    background: Background = Background()
    sweep: Sweep = Sweep()
    labels: dict[str, str] = {}

    @model_validator(mode="after")
    def _canaries(self) -> Scenario:
        ids = [c.id for c in self.canaries]
        if len(set(ids)) != len(ids):
            raise ValueError(f"canary ids must be distinct, got {ids}")
        return self

    def canary_kind(self, canary: Canary) -> EndpointKind:
        if canary.kind is not None:
            return canary.kind
        return "chat" if canary.messages is not None else self.endpoint.kind


def _field_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _describe(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid scenario"]
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling)"
        lines.append(f"  field {_field_path(loc)}: {msg}")
    return "\n".join(lines)


def parse_scenario(data: dict[str, Any], source: str) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_describe(exc, source)) from None


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
    levels: list[int] | None = None,
    canaries_per_level: int | None = None,
    labels: dict[str, str] | None = None,
) -> Scenario:
    """Apply command-line overrides, re-validating so an override gets the same checks as the file."""
    data = scenario.model_dump(mode="python")
    if base_url is not None:
        data["endpoint"]["base_url"] = base_url
    if levels is not None:
        data["sweep"]["levels"] = levels
    if canaries_per_level is not None:
        data["sweep"]["canaries_per_level"] = canaries_per_level
    if labels:
        data["labels"] = {**data["labels"], **labels}
    return parse_scenario(data, "command line")
