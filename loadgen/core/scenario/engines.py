"""The scenario sections that say how engines are started and compared: ``[launcher]``, ``[cold_boot]``,
``[matrix]``, and ``Side``, one server's own args and env (``[topology]``'s sides, a cell's overrides).

Why: a study that restarts an engine, or runs one scenario over several engine configurations, must
be validated data like the rest of the scenario (a typo fails before any process starts). This
module holds only the pydantic models; it starts nothing and imports nothing from ``loadgen`` but
errors-free pydantic, so ``loadgen.core.scenario`` can import it without a cycle.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

LauncherKind = Literal["embedded", "vllm", "sglang", "llamacpp", "command"]
PORT_PLACEHOLDER = "{port}"
# the variable whose value approves a launcher with require_approval: the SHA-256 of its command
# (loadgen.launchers.approval)
APPROVE_ENV = "LOADGEN_APPROVE_ENGINE"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# names whose value is a secret: it must come from the environment, never from a scenario file (which is
# copied into every run folder)
_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
_NEEDS_MODEL = ("vllm", "sglang", "llamacpp")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


# the shapes of common API keys and tokens (OpenAI, Hugging Face, GitHub, Slack, AWS, a bearer header)
_SECRET_VALUE = re.compile(
    r"\bsk-[A-Za-z0-9_-]{16,}|\bhf_[A-Za-z0-9]{20,}|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}|\bAKIA[0-9A-Z]{16}\b|\bBearer\s+\S{8,}"
)
# engine flags whose value is a key (vLLM's --api-key, SGLang's --api-key, llama.cpp's --api-key, hub tokens)
_SECRET_FLAG = re.compile(r"--(api[-_]key|hf[-_]token|token|password)", re.IGNORECASE)
_KEEP_OUT = (
    "scenario files are copied into run folders (manifest.json, engine.log): export it in the environment "
    "instead (the engine inherits this process's environment)"
)


def check_env(v: dict[str, str]) -> dict[str, str]:
    for name, value in v.items():
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not an environment variable name (letters, digits, _)")
        if _SECRET_NAME.search(name):
            raise ValueError(f"{name} looks like a secret; {_KEEP_OUT}")
        if _SECRET_VALUE.search(value):
            raise ValueError(f"the value of {name} looks like a key; {_KEEP_OUT}")
    return v


def check_args(v: list[str]) -> list[str]:
    """Engine arguments that hold a key (a key-shaped word, or the value of a key flag) are refused, never shown."""
    for i, arg in enumerate(v):
        flag = arg.split("=", 1)[0]
        if _SECRET_VALUE.search(arg) or (_SECRET_FLAG.fullmatch(flag) and ("=" in arg or i + 1 < len(v))):
            where = f"{flag}'s value" if _SECRET_FLAG.fullmatch(flag) else f"argument {i + 1}"
            raise ValueError(f"{where} looks like a key; {_KEEP_OUT}")
    return v


EnvVars = Annotated[dict[str, str], AfterValidator(check_env)]
EngineArgs = Annotated[list[str], AfterValidator(check_args)]

# the engine flags ``kv_offload`` becomes (loadgen.launchers.commands.kv_offload_flags): written by the launcher
KV_OFFLOAD_FLAGS = ("--kv-offloading-size", "--kv-offloading-backend", "--kv-offloading-dtype")


class KvOffload(_Strict):
    """A CPU tier for the engine's KV cache (docs/design.md, "Cache actions"): vLLM's built-in offloading
    (``--kv-offloading-size``, ``--kv-offloading-backend``) or the embedded engine's, which can also store the KV in
    another precision (``dtype``; fp8: the reload changes numerics)."""

    size_gib: float = Field(gt=0)
    backend: Literal["native", "lmcache"] = "native"  # lmcache: vLLM's LMCacheMPConnector (an LMCache server)
    dtype: Literal["bf16", "fp8"] | None = None  # the embedded engine only; None: its default (bf16, an exact copy)


def kv_offload_problem(kind: str, offload: KvOffload | None, args: list[str], where: str) -> str | None:
    """Why ``kind``'s engine cannot be given ``offload`` (``where``: the field that holds it, named in the message),
    or None. ``args``: the engine arguments it would be appended to, which must not give the flags themselves."""
    if offload is None:
        return None
    if kind not in ("embedded", "vllm"):
        return (
            f"{where}: kind {kind!r} has no KV offloading flags loadgen knows (embedded and vllm have); "
            "give the engine's own flags in 'args' or 'command'"
        )
    if kind == "embedded" and offload.backend != "native":
        return f"{where}.backend: the embedded engine's tier is 'native' only, not {offload.backend!r}"
    if kind == "vllm" and offload.dtype is not None:
        return f"{where}.dtype: vLLM's tier stores the KV as the engine holds it; dtype is the embedded engine's"
    for flag in KV_OFFLOAD_FLAGS:
        if any(a == flag or a.startswith(flag + "=") for a in args):
            return f"{where}: the args give {flag} too; the launcher writes it from kv_offload: drop one"
    return None


class LauncherSpec(_Strict):
    """How to start (and restart) the engine under test as a local process."""

    kind: LauncherKind = "embedded"
    model: str | None = Field(default=None, min_length=1)  # vllm/sglang/llamacpp: a path or a hub name
    args: EngineArgs = []  # appended to the command line this kind builds
    env: EnvVars = {}  # added to the environment the engine inherits
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 0  # 0: a free port picked at each start
    health_path: str = Field(default="/health", pattern=r"^/")
    ready_timeout_s: float = Field(default=900.0, gt=0)  # model loading and compilation can take minutes
    stop_timeout_s: float = Field(default=30.0, gt=0)  # SIGTERM, then SIGKILL to the whole process group
    # kind "command": a shell command that runs the server in the foreground; {port} is replaced by the port
    command: str | None = Field(default=None, min_length=1)
    # the program to run: vllm -> "vllm", sglang -> a Python with sglang installed, llamacpp -> "llama-server"
    executable: str | None = Field(default=None, min_length=1)
    # start only with the approval of the person running it: $LOADGEN_APPROVE_ENGINE (APPROVE_ENV) holds the SHA-256
    # of the exact command (loadgen.launchers.approval); loadgen repro sets it on the engine a replay starts
    require_approval: bool = False
    kv_offload: KvOffload | None = None  # a CPU KV tier: the engine's offloading flags (embedded and vllm)

    @model_validator(mode="after")
    def _consistent(self) -> LauncherSpec:
        if self.kind == "command":
            if self.command is None:
                raise ValueError("kind 'command' needs 'command', a shell command that runs the server")
            if self.port == 0 and PORT_PLACEHOLDER not in self.command:
                raise ValueError("put {port} in 'command' (a free port is picked per start) or set a fixed 'port'")
        elif self.command is not None:
            raise ValueError(f"'command' is only for kind 'command', not {self.kind!r}")
        if self.kind in _NEEDS_MODEL and self.model is None:
            raise ValueError(f"kind {self.kind!r} needs 'model' (a path or a model name)")
        if self.kind in ("embedded", "command") and self.model is not None:
            raise ValueError(f"kind {self.kind!r} takes no 'model' (the engine or the command decides it)")
        if self.kind == "embedded" and self.executable is not None:
            raise ValueError("kind 'embedded' takes no 'executable' (it runs this Python)")
        if why := kv_offload_problem(self.kind, self.kv_offload, self.args, "kv_offload"):
            raise ValueError(why)
        return self


TopologyMode = Literal["colocated", "pd", "reload"]  # loadgen.core.scenario.topology says what each one starts
# how the KV crosses from prefill to decode (vLLM: NixlConnector, which pulls, NixlPushConnector or ExampleConnector;
# SGLang: the transfer backend)
Connector = Literal["nixl", "nixl-push", "example", "mooncake"]
ConnectorExtra = dict[str, str | int | float | bool]


class Side(_Strict):
    """One server's own settings: ``args`` appended to ``[launcher].args``, ``env`` merged over its env.
    GPU shares are args (vLLM ``--gpu-memory-utilization 0.14``), devices env (``CUDA_VISIBLE_DEVICES``)."""

    args: EngineArgs = []
    env: EnvVars = {}
    kv_offload: KvOffload | None = None  # in place of [launcher].kv_offload on this server

    def over(self, base: Side) -> Side:
        """This side's settings after ``base``'s (a matrix cell's over the scenario's)."""
        offload = self.kv_offload or base.kv_offload
        return Side(args=[*base.args, *self.args], env={**base.env, **self.env}, kv_offload=offload)


class ColdBootSpec(_Strict):
    """Restart the engine ``boots`` times; after each start send every canary ``requests`` times, one at a time."""

    boots: Annotated[int, Field(ge=1)] = 6
    requests: Annotated[int, Field(ge=2)] = 6  # request 1 is compared with requests 2..N


class MatrixCell(_Strict):
    """One engine configuration: launcher overrides, or an external endpoint."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.=+-]+$")
    args: EngineArgs = []  # appended to [launcher].args (every server of a topology)
    env: EnvVars = {}  # merged over [launcher].env
    kv_offload: KvOffload | None = None  # in place of [launcher].kv_offload (every server of a topology)
    labels: dict[str, str] = {}  # recorded in the cell's manifest (and shown by compare)
    base_url: str | None = None  # an endpoint already running: no launcher for this cell
    topology: TopologyMode | None = None  # None: [topology].mode where the scenario has one, else colocated
    prefill: Side = Side()  # over [topology].prefill
    decode: Side = Side()  # over [topology].decode
    # the cell whose reference completions this cell's are compared with; None: the first cell
    compare_to: str | None = Field(default=None, min_length=1)
    # mode pd: the canaries also sent straight to the decode server before the sweep (its prefix cache reset
    # after) and after it (as the sweep left it, then after a reset): what its cache kept of the KV it received
    decoder_direct: bool = False
    # over [topology].connector and .connector_extra: a matrix may mix NIXL pairs with an ExampleConnector reload
    connector: Connector | None = None
    connector_extra: ConnectorExtra | None = None

    @field_validator("name")
    @classmethod
    def _not_a_folder_step(cls, name: str) -> str:
        # the cell's folder is OUT/cells/<name>: "." would be cells/ itself and ".." OUT, mixing the cells' runs
        if set(name) == {"."}:
            raise ValueError(f"{name!r} names no folder of its own (the cell's runs go in cells/<name>); use letters")
        return name

    @model_validator(mode="after")
    def _external_takes_no_overrides(self) -> MatrixCell:
        if self.base_url is not None and (self.args or self.env or self.prefill.args or self.prefill.env):
            raise ValueError("a cell with 'base_url' starts no engine: drop 'args', 'env' and 'prefill'")
        if self.base_url is not None and (self.decode.args or self.decode.env or self.topology or self.decoder_direct):
            raise ValueError("a cell with 'base_url' starts no engine: drop 'decode', 'topology' and 'decoder_direct'")
        if self.base_url is not None and (self.connector is not None or self.connector_extra is not None):
            raise ValueError("a cell with 'base_url' starts no engine: drop 'connector' and 'connector_extra'")
        if self.base_url is not None and self.kv_offload is not None:
            raise ValueError("a cell with 'base_url' starts no engine: drop 'kv_offload'")
        if self.compare_to == self.name:
            raise ValueError(f"compare_to names the cell itself ({self.name!r}); name another cell")
        return self


class MatrixSpec(_Strict):
    cells: list[MatrixCell] = Field(min_length=2)

    @field_validator("cells")
    @classmethod
    def _distinct(cls, v: list[MatrixCell]) -> list[MatrixCell]:
        names = [c.name for c in v]
        if len(set(names)) != len(names):
            raise ValueError(f"cell names must be distinct (each names a run folder), got {names}")
        for c in v:
            if c.compare_to is not None and c.compare_to not in names:
                raise ValueError(f"cell {c.name!r}: compare_to {c.compare_to!r} is not a cell; the cells are {names}")
        return v


def cells_offload_problem(matrix: MatrixSpec, launcher: LauncherSpec | None) -> str | None:
    """Why a cell's ``kv_offload`` (else ``[launcher]``'s) is not one the launcher's kind can be given, or None."""
    spec = launcher or LauncherSpec()
    for i, cell in enumerate(matrix.cells):
        if cell.base_url is not None:
            continue
        where = f"cells[{i}].kv_offload" if cell.kv_offload else "launcher.kv_offload"
        offload = cell.kv_offload or spec.kv_offload
        if why := kv_offload_problem(spec.kind, offload, [*spec.args, *cell.args], where):
            return why
    return None
