"""Request paths under an endpoint's base URL: where the OpenAI-style routes live whatever prefix it has.

Pure string work, shared by the probe (plain urllib, in the CLI's process) and the load path's client.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from loadgen.core.wire.types import KINDS, Kind


def v1_path(base_url: str, suffix: str) -> str:
    """``http://h:8000`` or ``http://h:8000/v1`` -> ``/v1/<suffix>`` (keeping any path prefix)."""
    path = urlsplit(base_url).path.rstrip("/")
    if not path.endswith("/v1"):
        path += "/v1"
    return f"{path}/{suffix}"


def api_path(base_url: str, kind: str) -> str:
    """The route of an endpoint kind; SGLang's ``/generate`` sits beside ``/v1``, not under it."""
    if kind == "generate":
        return v1_path(base_url, "")[: -len("/v1/")] + "/generate"
    return v1_path(base_url, "chat/completions" if kind == "chat" else "completions")


def origin(base_url: str) -> str:
    parts = urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc}"


@dataclass(frozen=True)
class Routes:
    """Every URL of one endpoint that the probe asks, derived once from its base URL: ``models`` (``/v1/models``),
    ``root`` (where the server's own routes live, ``/version``, ``/metrics``: the base URL without its ``/v1``)
    and each endpoint kind's route."""

    models: str
    root: str
    kinds: Mapping[Kind, str]

    @classmethod
    def of(cls, base_url: str) -> Routes:
        at = origin(base_url)
        return cls(
            models=at + v1_path(base_url, "models"),
            root=at + v1_path(base_url, "").removesuffix("/v1/"),
            kinds={kind: at + api_path(base_url, kind) for kind in KINDS},
        )
