"""Run options from Locust's parsed options, normalised in one place.

Why: values typed into Locust's web UI bypass argparse ``type=``, so ``--canaries-per-level`` may
arrive as ``"12"`` and ``--levels`` as ``"0, 4,16"``. Every custom option has a default of its real
type, is registered here, and is converted here, once. Pure apart from ``add_arguments``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen.errors import UsageError
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


def parse_levels(value: Any) -> list[int] | None:
    if value is None or value == "" or value == []:
        return None
    items = value if isinstance(value, list) else str(value).replace(" ", "").split(",")
    try:
        levels = [int(x) for x in items if str(x) != ""]
    except ValueError:
        raise UsageError(f"--levels: expected comma-separated non-negative integers, got {value!r}") from None
    if any(x < 0 for x in levels):
        raise UsageError(f"--levels: expected non-negative integers, got {value!r}")
    return levels or None


def parse_labels(value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    items = value if isinstance(value, list) else [p for p in str(value or "").split(",") if p.strip()]
    labels: dict[str, str] = {}
    for item in items:
        key, sep, val = str(item).partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--label: expected key=value, got {item!r}")
        labels[key.strip()] = val.strip()
    return labels


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
