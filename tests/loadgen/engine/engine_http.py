"""The one way the engine's tests POST to a running engine: JSON (or raw bytes) in, (status, body) out, an HTTP
error's status and body included (the tests assert on refusals as much as on answers)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def post(url: str, body: Any = None, raw: bytes | None = None) -> tuple[int, bytes]:
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
