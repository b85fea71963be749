"""The embedded engine refuses other web pages and foreign host names, as the web UI does.

Why: a page the user opens could otherwise POST to ``http://127.0.0.1:8000`` during a measured run and reset
the engine's prefix cache or add load (``loadgen.core.web_guard``). Against the engine started for real.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import pytest


def _call(url: str, headers: dict[str, str], body: object | None = None) -> tuple[int, dict[str, object]]:
    data = json.dumps(body).encode() if body is not None else b""
    method = "GET" if body is None and url.endswith("/v1/models") else "POST"
    req = urllib.request.Request(url, data=data if method == "POST" else None, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


COMPLETION = {"model": "loadgen-tiny", "prompt": "hello", "max_tokens": 2, "temperature": 0}


@pytest.mark.parametrize(
    ("path", "body", "headers"),
    [
        pytest.param("/reset_prefix_cache", {}, {"Origin": "http://evil.example"}, id="reset-from-another-page"),
        pytest.param("/reset_prefix_cache", {}, {"Origin": "null"}, id="reset-from-a-sandboxed-frame"),
        pytest.param("/v1/completions", COMPLETION, {"Referer": "http://evil.example/p.html"}, id="load-by-referer"),
        pytest.param("/v1/models", None, {"Host": "rebound.example"}, id="dns-rebound-name"),
    ],
)
def test_engine_refuses_foreign_pages_and_names(
    engine_url: str, path: str, body: object | None, headers: dict[str, str]
) -> None:
    status, answer = _call(engine_url + path, headers, body)
    assert status == 403, answer
    error = answer["error"]
    assert isinstance(error, dict) and "refused" in str(error["message"])


def test_engine_answers_scripts_and_its_own_page(engine_url: str) -> None:
    """No Origin (the load tool, curl) or the engine's own origin: answered as before."""
    own = f"http://{urlsplit(engine_url).netloc}"
    assert _call(engine_url + "/reset_prefix_cache", {}, {})[0] == 200
    assert _call(engine_url + "/v1/completions", {"Origin": own}, COMPLETION)[0] == 200
    assert _call(engine_url + "/v1/models", {"Host": "localhost"})[0] == 200
