"""Scenario files: validated data describing one run, loaded before any traffic is sent.

Why: a typo in a scenario must fail at once with the file and the field named, not after an hour of
load. This module validates (``loadgen.core.scenario.loading`` reads the file and applies overrides); it sends
nothing and imports nothing from Locust.
Its messages (``loadgen.core.scenario.messages``) never echo a value that may be a secret
(``api_key_env``, credentials in a URL).

Why this length: the run's sections (endpoint, canaries, background, sweep) are one tree that
``Scenario``'s checks read across (a burst against the sweep's levels and each canary's kind and
sampling, a topology against ``[launcher]``); split further, those checks would reach into several
modules for the types they compare, and the shared field types would need a module of their own.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from loadgen.core.claims import MAX_CLAIM_CANARIES, canaries_needed
from loadgen.core.errors import ScenarioError, control_character
from loadgen.core.scenario.engines import ColdBootSpec, LauncherSpec, MatrixSpec, cells_offload_problem
from loadgen.core.scenario.limits import MAX_LEVEL, MAX_LEVELS
from loadgen.core.scenario.messages import describe
from loadgen.core.scenario.phase import parse_phase
from loadgen.core.scenario.sampled import expand, sampling_problem
from loadgen.core.scenario.topology import TopologySpec, check_topology

EndpointKind = Literal["completions", "chat", "generate"]  # "generate": SGLang's native /generate
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEY_PREFIXES = ("sk-", "sk_", "hf_", "gsk_", "xai-", "nvapi-", "ghp_", "gho_", "github_pat_", "glpat-", "AIza")
_KEY_RUN = re.compile(r"[A-Za-z0-9]{16,}")  # a long unbroken run with digits: a token, not a variable name
PositiveInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]
MAX_PROMPT_WORDS = 100_000  # about 130k tokens: beyond any served context; bounds the background word corpus
PromptWords = Annotated[int, Field(ge=1, le=MAX_PROMPT_WORDS)]
Level = Annotated[int, Field(ge=0, le=MAX_LEVEL)]
MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # default cap on one response: a 128k-token answer with logprobs fits


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


def _looks_like_key(value: str) -> bool:
    return value.startswith(_KEY_PREFIXES) or any(any(c.isdigit() for c in m) for m in _KEY_RUN.findall(value))


def check_base_url(v: str) -> str:
    """An http(s) base URL with a host, no credentials, no query or fragment; its trailing '/' dropped."""
    parts = urlsplit(v)
    if parts.username is not None or parts.password is not None:  # never echoed: it may hold a secret
        raise ValueError(
            "credentials in the URL would be recorded in the run folder; remove them and name "
            "an environment variable holding the key in endpoint.api_key_env"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http(s) URL such as http://127.0.0.1:8000, got {v!r}")
    if parts.query or parts.fragment:
        raise ValueError(
            "expected a base URL without '?query' or '#fragment' (not shown: it may hold a key; "
            "name the key's environment variable in endpoint.api_key_env)"
        )
    try:
        parts.port  # noqa: B018 - urlsplit checks the port only when it is read
    except ValueError:
        raise ValueError(f"expected a port between 0 and 65535, got {v!r}") from None
    return v.rstrip("/")


ServerRole = Literal["prefill", "decode", "both"]
ServerName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]


class Server(_Strict):
    """One engine behind the endpoint: the endpoint's URL is a router, this is an instance it routes to.

    Traffic never goes here (it goes to ``endpoint.base_url``); the tool reads this server's
    ``/metrics`` so every canary knows the batch it shared on each side (docs/design.md,
    "Prefill/decode: servers behind one endpoint")."""

    name: ServerName
    role: ServerRole = "both"  # "prefill": computes prompts' KV; "decode": decodes from KV it received
    base_url: str
    # where its Prometheus gauges are; default base_url + "/metrics"; "" when it has none (x-axis unmeasured)
    metrics_url: str | None = None

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        return check_base_url(v)

    @field_validator("metrics_url")
    @classmethod
    def _metrics(cls, v: str | None) -> str | None:
        return check_base_url(v) if v else v


class Endpoint(_Strict):
    """Where to send requests. No ``base_url`` means: start the embedded engine."""

    base_url: str | None = None
    kind: EndpointKind = "completions"
    model: str | None = Field(default=None, min_length=1)  # read from /v1/models when omitted
    api_key_env: str | None = None  # the NAME of an environment variable; its value is never stored
    connect_timeout_s: float = Field(default=10.0, gt=0)
    read_timeout_s: float = Field(default=600.0, gt=0)  # long generations: not Locust's 60 s
    # the whole request, send to last byte; None: read_timeout_s + 2 s per max_tokens (loadgen.load.client.Limits)
    request_timeout_s: float | None = Field(default=None, gt=0)
    # a response larger than this is cut and recorded as "response_too_large" (a runaway or hostile server)
    max_response_bytes: int = Field(default=MAX_RESPONSE_BYTES, ge=1024)
    # POSTed before a canary with cache = "reset": vLLM and the embedded engine "/reset_prefix_cache"
    # (vLLM needs VLLM_SERVER_DEV_MODE=1), SGLang "/flush_cache"
    cache_reset_path: str = Field(default="/reset_prefix_cache", pattern=r"^/")
    # the engines behind a router (prefill/decode disaggregation): each one's /metrics is read; empty: the
    # endpoint is one engine and its own /metrics is read
    # seconds between /metrics scrapes (of the endpoint, or of each server): shorter catches a short prefill window
    metrics_interval_s: float = Field(default=0.05, ge=0.005, le=10.0)
    servers: list[Server] = Field(default=[], max_length=64)

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return None if v is None else check_base_url(v)

    @field_validator("servers")
    @classmethod
    def _distinct_servers(cls, v: list[Server]) -> list[Server]:
        names = [x.name for x in v]
        if len(set(names)) != len(names):
            raise ValueError(f"server names must be distinct (each names its metrics and logs), got {names}")
        roles = {x.role for x in v}
        if v and not ({"prefill", "both"} & roles and {"decode", "both"} & roles):
            raise ValueError(
                f"the servers must cover both prefill and decode (roles given: {sorted(roles)}); "
                "give a 'prefill' and a 'decode' server, or role 'both'"
            )
        return v

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        # the value is never echoed: a key pasted here must not reach a terminal, a log or a CI page
        if v is None:
            return v
        if _looks_like_key(v):
            raise ValueError(
                "this looks like an API key, not the NAME of an environment variable: put the key in "
                "the environment (export OPENAI_API_KEY=...) and write only the variable's name here "
                "(the value is not shown)"
            )
        if not _ENV_NAME.fullmatch(v):
            raise ValueError(
                "expected the NAME of an environment variable (letters, digits and _, not starting "
                "with a digit) such as OPENAI_API_KEY (the value is not shown)"
            )
        return v


class Message(_Strict):
    role: Literal["system", "user", "assistant"]
    content: str


class Canary(_Strict):
    """One fixed request. Greedy by default (temperature 0, top_p 1, sent explicitly); with temperature > 0 a
    seeded sample, a seed contract (``loadgen.core.scenario.sampled``; docs/design.md, "Sampled canaries and the
    seed contracts")."""

    id: str = Field(default="canary", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    prompt: str | None = Field(default=None, min_length=1)
    messages: list[Message] | None = None
    kind: EndpointKind | None = None  # defaults to the endpoint's kind
    max_tokens: PositiveInt = 64
    seed: int | None = 0
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)  # sent only where set (hosted OpenAI APIs refuse it); -1: all
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)  # sent only where set
    n: Annotated[int, Field(ge=1, le=16)] = 1  # choices of one request, each recorded as canary id + ".choice<j>"
    # a set of seeds, or of routes: one canary each (ids "<id>.seed<s>", "<id>.<route>", "<id>.<route>.seed<s>"),
    # compared with each other in the report's seed contracts
    seeds: list[int] | None = Field(default=None, max_length=16)
    routes: list[EndpointKind] | None = None
    family: str | None = None  # set by the expansion of seeds/routes: the id written in the scenario
    logprobs: bool = True
    top_logprobs: Annotated[int, Field(ge=0, le=20)] = 2
    stream: bool = False
    # prefix cache before this canary (docs/design.md, "Cache actions"): "keep" it; "miss": a guaranteed miss by
    # what works where it is sent (a reset when nothing else runs, else a fresh cache_salt: vLLM refuses to reset
    # its cache while requests run); or force one mechanism: "reset" (POST endpoint.cache_reset_path, effect
    # checked in the report) or "salt" (a fresh per-request cache_salt, vLLM and the embedded engine); "offload":
    # the prompt's KV out of the GPU but kept in the offload tier (a GPU-only reset, else filler prompts that
    # turn the GPU prefix cache over), so this canary must load it back
    cache: Literal["keep", "miss", "reset", "salt", "offload"] = "keep"
    # what usage.prompt_tokens_details.cached_tokens should show; the report flags canaries that disagree
    expect_cache: Literal["hit", "miss"] | None = None
    # send each completion's prompt ids + output ids back teacher-forced (docs/design.md, "The re-score check"),
    # at its level and alone after the load, and compare the logprobs; the top k compared: top_logprobs
    rescore: bool = False

    @field_validator("messages")
    @classmethod
    def _some_messages(cls, v: list[Message] | None) -> list[Message] | None:
        if v is not None and not v:
            raise ValueError("must not be empty: give at least one {role, content} message")
        return v

    @model_validator(mode="after")
    def _one_input(self) -> Canary:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of 'prompt' or 'messages'")
        if self.kind in ("completions", "generate") and self.messages is not None:
            raise ValueError(f"a {self.kind} canary needs 'prompt', not 'messages'")
        if (problem := sampling_problem(self)) is not None:
            raise ValueError(problem)
        if self.rescore and (self.messages is not None or not self.logprobs or self.n > 1):
            raise ValueError(
                "field rescore: a re-score sends the prompt's and output's token ids back and compares logprobs, so "
                "it needs a 'prompt' (completions or generate, not chat), logprobs = true and n = 1"
            )
        return self


BackgroundSide = Literal["prefill", "decode"]
# what ``background.side`` sets where the scenario does not (docs/design.md, "Prefill/decode: servers behind one
# endpoint"): the prefill side gets long prompts and 1-4 output tokens, the decode side short prompts and long outputs
SIDE_PRESETS: dict[str, dict[str, tuple[int, int]]] = {
    "prefill": {"prompt_words": (96, 160), "max_tokens": (1, 4)},
    "decode": {"prompt_words": (4, 12), "max_tokens": (96, 160)},
}


class Background(_Strict):
    """Traffic that exists to shape the engine's batch; never analysed for determinism."""

    # which side of a prefill/decode endpoint the level loads and is held on; None: one engine (or the decode side)
    side: BackgroundSide | None = None
    seed: int = 1
    prompt_words: tuple[PromptWords, PromptWords] = (8, 200)
    max_tokens: tuple[PositiveInt, PositiveInt] = (16, 128)
    shared_prefix_share: float = Field(default=0.0, ge=0.0, le=1.0)
    shared_prefix_words: NonNegInt = 48
    stream: bool = True
    kind: EndpointKind | None = None
    wait_s: float = Field(default=0.0, ge=0.0)  # pause between a user's requests; 0 keeps one in flight
    # holding the level (docs/design.md, "held"): a seeded delay before each user's first request, so users
    # never move as a wave; a streamed request starts its successor 3 tokens, or this long, before its expected end
    spawn_jitter_s: float = Field(default=0.25, ge=0.0)
    handover_s: float = Field(default=0.05, ge=0.0)  # 0: no hand-over (a slot is empty between requests)
    # which phase of each sweep canary the background loads (docs/design.md, "Background aimed at one phase"):
    # "all" (held throughout), "decode" or "from:<p>" (sent once the canary shows its first or p-th token, stopped
    # at its end), "prefill" (one request per slot, prefilled before the canary goes, none while it runs)
    phase: str = "all"

    @model_validator(mode="before")
    @classmethod
    def _side_preset(cls, data: Any) -> Any:
        """A side's lengths where the scenario gives none (a re-validated dump keeps its own)."""
        if isinstance(data, dict) and isinstance(data.get("side"), str) and data["side"] in SIDE_PRESETS:
            return {**SIDE_PRESETS[data["side"]], **data}
        return data

    @field_validator("phase")
    @classmethod
    def _phase(cls, v: str) -> str:
        return str(parse_phase(v))

    @field_validator("prompt_words", "max_tokens", mode="before")
    @classmethod
    def _pair(cls, v: Any) -> Any:
        if isinstance(v, list | tuple) and len(v) != 2:
            raise ValueError(f"expected [low, high], two whole numbers, got {len(v)} value(s)")
        return v

    @field_validator("prompt_words", "max_tokens")
    @classmethod
    def _ordered(cls, v: tuple[int, int]) -> tuple[int, int]:
        if v[0] > v[1]:
            raise ValueError(f"expected [low, high] with low <= high, got {list(v)}")
        return v


class Sweep(_Strict):
    levels: list[Level] = Field(default=[0, 1, 2, 4, 8], min_length=1, max_length=MAX_LEVELS)
    canaries_per_level: PositiveInt = 10
    warmup: NonNegInt = 1
    baseline: NonNegInt = 5
    canary_pace_s: float = Field(default=0.0, ge=0.0)  # 0: back to back
    spawn_rate: float = Field(default=100.0, gt=0)
    settle_timeout_s: float = Field(default=10.0, gt=0)  # longest wait for a level's users to be in flight
    # after the levels: one stage per size, each firing that many copies of each canary at once with no
    # background (the original "1,000 identical requests" experiment), recorded at level = the requests it
    # fires (size x canaries). A number or a list of sizes, fired in the order given; 0 or [] for none.
    burst: list[Level] = Field(default=[], max_length=MAX_LEVELS)
    # "reset": before each burst, once nothing else runs, the endpoint's cache reset route is POSTed, so the
    # copies share only the prefixes they prefill together (SGLang's test_deterministic prefix mode); "keep":
    # the cache is left as the stages before left it
    burst_cache: Literal["keep", "reset"] = "keep"
    # "even": a burst of N holds N copies of each canary; "random": its N x canaries requests each send a canary
    # drawn at random (seeded by background.seed and the stage), so bursts mix the canaries in varied numbers,
    # as SGLang's test_deterministic prefix mode draws each batch's prompts
    burst_mix: Literal["even", "random"] = "even"
    # "separate": each copy is its own HTTP request on its own connection; "one-request": a burst's copies go
    # out as one request carrying every prompt (a `prompt` list on completions, a `text` list on SGLang's
    # /generate), so the engine receives them in the same instant and can prefill them as one batch (separate
    # requests pass one at a time through a server's HTTP and tokenizer front end); sent unstreamed
    burst_send: Literal["separate", "one-request"] = "separate"
    # "the divergence rate is below this at 95% confidence" (loadgen.core.claims): every level must send at least the
    # canaries the claim needs; a level ends early once a divergence makes the claim impossible there
    claim_max_rate: float | None = Field(default=None, gt=0, lt=1)

    @field_validator("levels")
    @classmethod
    def _unique(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"levels must be distinct, got {v}")
        return v

    @field_validator("burst", mode="before")
    @classmethod
    def _burst_sizes(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            return [v] if v else []
        return v

    @field_validator("burst")
    @classmethod
    def _burst_sizes_distinct(cls, v: list[int]) -> list[int]:
        if 0 in v:
            raise ValueError("a burst of 0 copies fires nothing: leave it out (burst = 0 alone means no burst)")
        if len(set(v)) != len(v):
            raise ValueError(f"burst sizes must be distinct, got {v}")
        return v

    @field_validator("claim_max_rate")
    @classmethod
    def _claim_canaries(cls, v: float | None, info: ValidationInfo) -> float | None:
        if v is None:
            return v
        need, have = canaries_needed(v), info.data.get("canaries_per_level")
        if need > MAX_CLAIM_CANARIES:
            raise ValueError(f"a claim at {v:g} needs {need} canaries per level, more than {MAX_CLAIM_CANARIES}")
        if isinstance(have, int) and have < need:
            raise ValueError(
                f"a claim at {v:g} needs {need} canaries per level (canaries_per_level is {have}): raise it"
            )
        return v


class Scenario(_Strict):
    # the run folder is named after it: no path separators, no control characters, no leading dot
    name: str = Field(default="scenario", min_length=1, pattern=r"^[^./\\\x00-\x1f][^/\\\x00-\x1f]*$")
    description: str = ""
    endpoint: Endpoint = Endpoint()
    canaries: list[Canary] = Field(min_length=1)
    background: Background = Background()
    sweep: Sweep = Sweep()
    labels: dict[str, str] = {}
    launcher: LauncherSpec | None = None  # how to start the engine when endpoint.base_url is not set
    # the endpoint as prefill and decode engines behind a router, started with [launcher]'s kind (docs/studies.md)
    topology: TopologySpec | None = None
    cold_boot: ColdBootSpec | None = None  # `loadgen coldboot`: restart the engine between trials
    matrix: MatrixSpec | None = None  # `loadgen matrix`: the same study over several engine configurations

    @field_validator("labels")
    @classmethod
    def _plain_labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            for text in (key, value):
                if (bad := control_character(text)) is not None:
                    raise ValueError(f"label {key!r}: holds the control character {bad!r} (labels land in scripts)")
        return v

    @field_validator("canaries")
    @classmethod
    def _distinct_ids(cls, v: list[Canary]) -> list[Canary]:
        v = expand(v)  # a seeds or routes set: one canary each, named in the ids checked here
        ids = [c.id for c in v]
        if len(set(ids)) != len(ids):
            raise ValueError(f"canary ids must be distinct (give each [[canaries]] its own id), got {ids}")
        return v

    @field_validator("background")
    @classmethod
    def _phase_streams(cls, v: Background, info: ValidationInfo) -> Background:
        """A background aimed at one phase of the canary is timed by the canary's stream (its first token, its
        p-th), and in prefill mode by each background request's first token."""
        phase = parse_phase(v.phase)
        if not phase.aimed:
            return v
        for c in info.data.get("canaries") or []:
            if not c.stream:
                raise ValueError(
                    f'phase = "{phase}" times the background by the canary\'s tokens as they stream: set '
                    f"stream = true on canary {c.id!r}"
                )
        if phase.kind == "prefill" and not v.stream:
            raise ValueError(
                'phase = "prefill" waits for each background request\'s first token: set background.stream = true'
            )
        return v

    @field_validator("sweep")
    @classmethod
    def _burst_apart(cls, v: Sweep, info: ValidationInfo) -> Sweep:
        """A burst is reported at the requests it fires at once, each canary's copies together: that level
        must not be one of the sweep's, or the two stages would be reported as one."""
        n = len(info.data.get("canaries") or [None])
        if v.burst and (offload := [c.id for c in info.data.get("canaries") or [] if c.cache == "offload"]):
            raise ValueError(  # as many flushes at once, each evicting what the other copies just prefilled
                f'burst fires copies of every canary at once, and canary {offload[0]!r} has cache = "offload" (a '
                "flush of the GPU cache before each copy): run bursts in a scenario without offload canaries"
            )
        for size in v.burst:
            if size * n > MAX_LEVEL:
                raise ValueError(
                    f"burst {size} fires {size * n} requests at once ({n} canaries), more than {MAX_LEVEL}: "
                    "no engine batches that many"
                )
            if size * n in v.levels:
                copies = f"{size} copies of each of {n} canaries" if n > 1 else f"{size} copies"
                raise ValueError(
                    f"burst {size} ({copies} at once) equals level {size * n}: the two would be reported as "
                    "one; pick another size"
                )
        return v

    @field_validator("sweep")
    @classmethod
    def _burst_in_one_request(cls, v: Sweep, info: ValidationInfo) -> Sweep:
        """One request carries a burst's prompts only where the dialect takes a list and every copy asks the
        same apart from its prompt (one set of sampling parameters travels with the list)."""
        if v.burst_send != "one-request":
            return v
        if not v.burst:
            raise ValueError('burst_send = "one-request" sends bursts: set burst (a size or a list of sizes)')
        endpoint, canaries = info.data.get("endpoint"), info.data.get("canaries") or []
        if endpoint is None:
            return v  # the endpoint failed its own checks, reported there
        asks: set[tuple[Any, ...]] = set()
        for c in canaries:
            kind = _kind_of(c, endpoint.kind)
            if kind not in ("completions", "generate"):
                raise ValueError(
                    f'burst_send = "one-request" needs prompt lists, which kind "{kind}" has not (canary '
                    f'{c.id!r}): use kind "completions" or "generate"'
                )
            if c.stream or c.cache != "keep":
                raise ValueError(
                    f'burst_send = "one-request" sends unstreamed copies with the cache kept (canary {c.id!r} has '
                    f"stream = {str(c.stream).lower()}, cache = {c.cache!r}): reset the cache with burst_cache"
                )
            if c.n > 1:
                raise ValueError(f'burst_send = "one-request" numbers its choices by prompt: canary {c.id!r} has n > 1')
            sampling = (c.temperature, c.top_p, c.top_k, c.min_p)
            asks.add((kind, c.max_tokens, c.seed, c.logprobs, c.top_logprobs, sampling))
        if len(asks) > 1:
            raise ValueError(
                'burst_send = "one-request" sends one set of sampling parameters with every prompt: give the '
                "canaries the same kind, max_tokens, seed, sampling, logprobs and top_logprobs"
            )
        return v

    @field_validator("matrix")
    @classmethod
    def _cells_offload(cls, v: MatrixSpec | None, info: ValidationInfo) -> MatrixSpec | None:
        if v is not None and (why := cells_offload_problem(v, info.data.get("launcher"))):
            raise ValueError(why)
        return v

    @field_validator("topology")
    @classmethod
    def _topology_runs(cls, v: TopologySpec | None, info: ValidationInfo) -> TopologySpec | None:
        if v is not None and (why := check_topology(v, info.data.get("launcher"), v.mode)):
            raise ValueError(why)
        return v

    def canary_kind(self, canary: Canary) -> EndpointKind:
        return _kind_of(canary, self.endpoint.kind)


def _kind_of(canary: Canary, endpoint_kind: EndpointKind) -> EndpointKind:
    """The dialect a canary is sent in: its own ``kind``, else chat for messages, else the endpoint's."""
    if canary.kind is not None:
        return canary.kind
    return "chat" if canary.messages is not None else endpoint_kind


def parse_scenario(data: dict[str, Any], source: str) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(describe(exc, source)) from None
