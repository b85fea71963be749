"""The run folder's birth and ``manifest.json``: created once, never overwritten, finished at the end.

Why: a run folder is evidence; a second run must never clobber the first, and a run that dies must
still say what it was. Writes are atomic (temporary file, then rename). No Locust imports.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import socket
from pathlib import Path
from typing import Any

import orjson

from loadgen.errors import RunFolderError

MANIFEST = "manifest.json"
MANIFEST_SCHEMA = 1


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def create_run_dir(out_root: Path, name: str) -> Path:
    """Make a new, empty folder ``out_root/<UTC time>-<name>``; an existing one is never reused."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out_root.mkdir(parents=True, exist_ok=True)
    for n in range(1000):
        path = out_root / (f"{stamp}-{name}" if n == 0 else f"{stamp}-{name}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise RunFolderError(f"{path}: cannot create run folder ({exc.strerror or exc})") from None
        return path
    raise RunFolderError(f"{out_root}: could not find a free run folder name for {name!r}")


def host_info() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    tmp = run_dir / f".{MANIFEST}.tmp"
    tmp.write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    os.replace(tmp, run_dir / MANIFEST)


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """The manifest as a dict; a missing, unreadable, malformed or unknown-schema one is a RunFolderError."""
    path = run_dir / MANIFEST
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise RunFolderError(f"{path}: missing (every run folder has a manifest.json)") from None
    except OSError as exc:
        raise RunFolderError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except orjson.JSONDecodeError as exc:
        raise RunFolderError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RunFolderError(f"{path}: expected a JSON object, got {type(data).__name__}")
    if data.get("schema") != MANIFEST_SCHEMA:
        raise RunFolderError(
            f"{path}: manifest schema {data.get('schema')!r} is not supported (expected {MANIFEST_SCHEMA})"
        )
    return data


def update_manifest(run_dir: Path, **changes: Any) -> dict[str, Any]:
    manifest = read_manifest(run_dir)
    manifest.update(changes)
    write_manifest(run_dir, manifest)
    return manifest
