"""Run options from Locust's parsed options, normalised in one place; what a web UI start may change.

Why: values typed into Locust's web UI bypass argparse ``type=``, so ``--canaries-per-level`` may
arrive as ``"12"`` and ``--levels`` as ``"0, 4,16"``. Every custom option has a default of its real
type, is registered here, and is converted here, once. Pure apart from ``add_arguments``.

Locust's ``/swarm`` writes every form field that names a parsed option into the parsed options, so a
start could otherwise point the run (and the API key) at another host, another scenario or another
folder. ``Launch`` keeps the options as Locust started, and says which form fields a start may set:
the sweep's shape (levels, canaries per level, labels) and Locust's own run fields; host, scenario,
out-dir and run-dir only with ``--ui-allow-changes``; no other option ever.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pydantic import TypeAdapter

from loadgen.core.errors import UsageError
from loadgen.core.manifest import EngineFacts
from loadgen.core.options import parse_labels, parse_levels
from loadgen.core.scenario import Server
from scenarios import path_of


@dataclass(frozen=True, slots=True)
class RunOptions:
    scenario: str
    run_dir: str  # a folder prepared by ``loadgen run``; empty: prepare one under out_dir
    out_dir: str
    levels: list[int] | None
    canaries_per_level: int | None
    labels: dict[str, str]
    host: str | None


def add_arguments(parser: Any) -> None:
    """Register the custom options on Locust's parser (they show in the web UI's form)."""
    # Locust's own parser, not an argument group: only it understands ``include_in_web_ui``.
    group = parser
    group.add_argument(
        "--scenario", type=str, default=str(path_of("quickstart")), help="scenario TOML file or shipped scenario name"
    )
    group.add_argument("--levels", type=str, default="", help="comma-separated concurrency levels (overrides)")
    group.add_argument("--canaries-per-level", type=int, default=0, help="canaries per level (0: the scenario's)")
    group.add_argument("--labels", type=str, default="", help="k=v,k=v labels recorded in the manifest")
    group.add_argument("--out-dir", type=str, default="runs", help="where run folders are created")
    group.add_argument(
        "--run-dir",
        type=str,
        default="",
        include_in_web_ui=False,
        help="a run folder already prepared by 'loadgen run' (internal)",
    )
    group.add_argument(
        "--started-engine",
        type=str,
        default="",
        include_in_web_ui=False,
        help="JSON: the engine 'loadgen run --ui' started for this host, its logs and servers (internal)",
    )
    group.add_argument(
        "--ui-allow-changes",
        action="store_true",
        default=False,
        include_in_web_ui=False,
        help="let a web UI start change host, scenario and out-dir (default: fixed at launch)",
    )


def summary_only(parsed: Any) -> None:
    """Locust's stats table once, at the end, as ``--only-summary`` does, unless ``--print-stats`` asks for it
    every 2 s: a headless ``locust -f`` would otherwise fill a CI log with tables the run's report has better."""
    if parsed is not None and not getattr(parsed, "print_stats", False):
        parsed.only_summary = True


def normalise(parsed: Any) -> RunOptions:
    def get(name: str, default: Any) -> Any:
        return getattr(parsed, name, default) if parsed is not None else default

    cpl_raw = get("canaries_per_level", 0)
    try:
        cpl = int(cpl_raw or 0)
    except (TypeError, ValueError):
        raise UsageError(f"--canaries-per-level: expected a positive integer, got {cpl_raw!r}") from None
    if cpl < 0:
        raise UsageError(f"--canaries-per-level: expected a positive integer, got {cpl_raw!r}")
    host = get("host", None) or None
    return RunOptions(
        scenario=str(get("scenario", "") or path_of("quickstart")),
        run_dir=str(get("run_dir", "") or ""),
        out_dir=str(get("out_dir", "runs") or "runs"),
        levels=parse_levels(get("levels", "")),
        canaries_per_level=cpl or None,
        labels=parse_labels(get("labels", "")),
        host=str(host).rstrip("/") if host else None,
    )


# what the coordinator logs as a run starts and once it is over (reports written): ``loadgen run --ui`` follows
# each run on the terminal from these lines of Locust's log (``loadgen.studies.ui_session``)
RUN_STARTED = "run folder: "
RUN_ENDED = "run ended: "


@dataclass(frozen=True, slots=True)
class StartedEngine:
    """What ``loadgen run --ui`` started before Locust (``--started-engine``), for each start's run folder to
    record as a headless run does: the manifest's ``engine``, the engines behind the URL (``endpoint.servers``)
    and the logs to keep in the run folder (``engine.log``, a topology's one per process)."""

    url: str
    facts: EngineFacts
    logs: list[str]
    servers: list[Server]

    def to_option(self) -> str:
        servers = [s.model_dump(mode="json") for s in self.servers]
        return json.dumps({"url": self.url, "facts": self.facts, "logs": self.logs, "servers": servers})

    @classmethod
    def of(cls, parsed: Any) -> StartedEngine | None:
        raw = getattr(parsed, "started_engine", "") if parsed is not None else ""
        if not raw:
            return None
        try:
            data = json.loads(raw)
            facts = _FACTS.validate_python(data["facts"])
            servers = [Server.model_validate(s) for s in data["servers"]]
            return cls(str(data["url"]), facts, [str(p) for p in data["logs"]], servers)
        except (ValueError, TypeError, KeyError) as exc:  # pydantic's ValidationError is a ValueError
            raise UsageError(f"--started-engine: not what 'loadgen run --ui' passes ({exc})") from None


_FACTS: TypeAdapter[EngineFacts] = TypeAdapter(EngineFacts)


FIXED_AT_LAUNCH = ("host", "scenario", "out_dir", "run_dir")
# what a start from the form may set: the sweep's shape, and the fields Locust's own form always sends
FORM_FIELDS = frozenset(
    {"levels", "canaries_per_level", "labels", "user_count", "spawn_rate", "run_time", "profile"}
    | {"user_classes", "shape_class"}
)


@dataclass(frozen=True, slots=True)
class Launch:
    """The parsed options as Locust started, copied before any web UI start rewrote them in place."""

    options: dict[str, Any]

    @classmethod
    def of(cls, parsed: Any) -> Launch:
        return cls(dict(vars(parsed)) if parsed is not None else {})

    @property
    def allow_changes(self) -> bool:
        return bool(self.options.get("ui_allow_changes"))

    def options_namespace(self, form: Mapping[str, str] | None = None) -> SimpleNamespace:
        """The launch options, with a form's fields over them as Locust's ``/swarm`` would set them."""
        return SimpleNamespace(**{**self.options, **(form or {})})

    def refusal(self, form: Mapping[str, str]) -> str | None:
        """Why a web UI start with these form fields must not go ahead, or None."""
        other = sorted(k for k in form if k in self.options and k not in FORM_FIELDS and k not in FIXED_AT_LAUNCH)
        if other:
            return f"a start from the web UI may not set {', '.join(other)}"
        changed = [k for k in FIXED_AT_LAUNCH if k in form and not _same(k, form[k], self.options.get(k))]
        if changed and not self.allow_changes:
            names = ", ".join(k.replace("_", "-") for k in changed)
            return (
                f"{names}: fixed when the web UI was started; to change them, start it again with those values "
                "(or with --ui-allow-changes)"
            )
        return None


def _same(key: str, typed: Any, launched: Any) -> bool:
    """Whether a form value means the launch value (the form echoes them, spelled its own way)."""
    a, b = str(typed or ""), str(launched or "")
    if key == "host":
        return a.rstrip("/") == b.rstrip("/")
    if key == "scenario":
        return bool(a) and path_of(a).resolve() == path_of(b).resolve()
    if key == "out_dir":
        return Path(a or "runs").resolve() == Path(b or "runs").resolve()
    return a == b
