"""Ask an endpoint, once per run and before any load, who it is and which request dialect it accepts.

Why: servers differ (vLLM's ``return_token_ids``, llama.cpp's ids inside logprobs, hosted APIs that
reject unknown fields). The probe reads ``/v1/models`` and the version, then sends one short
request per endpoint kind, dropping optional fields the server refuses, and records what it used.
The probe prompt is unrelated to any canary, so it warms no canary prefix in a cache.

Blocking stdlib HTTP (works with or without gevent's patching). It follows no redirect: the API key
goes to the configured host and nowhere else. Raises ``EndpointError`` naming the URL; prints nothing.
The server is not trusted: an answer is read up to ``endpoint.max_response_bytes`` and, connect to last
byte, status line and headers included, within twice its timeout (``loadgen.core.deadline_http``), and the
key is redacted from every error and from what is kept (``/v1/models``, ``/version``), since a server may
echo request headers back. What is kept of its JSON answers is normalised where it is decoded
(``loadgen.core.jsonsafe``: finite numbers, valid Unicode, 64-bit integers, bounded depth), said in
``ServerInfo.notices``; a model id the run would send but cannot (a lone surrogate) is refused.

Why this length: its guarded HTTP (no redirect, a deadline from connect to last byte, a bounded body, the key
redacted) serves the probe alone and is what makes the guarantees above true; apart, a reader would have to
hold two modules to check one promise.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from loadgen.core.deadline_http import DeadlineExceeded, DeadlineHTTPConnection, DeadlineHTTPSConnection
from loadgen.core.errors import EndpointError, redact, redact_json
from loadgen.core.jsonsafe import describe, lone_surrogate, normalised
from loadgen.core.scenario.schema import MAX_RESPONSE_BYTES
from loadgen.core.wire import Features, Kind, MalformedResponse, build_body, features_from_probe, parse_body
from loadgen.core.wire.server_config import info_series, server_settings
from loadgen.core.wire.urls import Routes

PROBE_PROMPT = "Reply with one word: ready"


@dataclass
class KindProbe:
    features: Features
    identity: str  # "token_ids", "tokens" or "text": what the completions will be compared by
    attempts: list[str] = field(default_factory=list)
    # the answer carried usage.prompt_tokens_details.cached_tokens (vLLM: only with --enable-prompt-tokens-details)
    cached_tokens_reported: bool | None = None


@dataclass
class ServerInfo:
    base_url: str
    model: str
    models: Any  # the /v1/models body
    version: str | None
    kinds: dict[Kind, KindProbe]
    config: dict[str, Any] = field(default_factory=dict)  # what the server says of its settings (read_config)
    notices: list[str] = field(default_factory=list)  # what of its answers was normalised to be kept

    def features_json(self) -> dict[str, Any]:
        return {
            k: {
                "features": asdict(p.features),
                "identity": p.identity,
                "attempts": p.attempts,
                "cached_tokens_reported": p.cached_tokens_reported,
            }
            for k, p in self.kinds.items()
        }


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """urllib would follow a redirect and send the Authorization header on to any host: refuse instead."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> None:
        fp.close()
        raise EndpointError(
            f"{req.full_url}: HTTP {code} redirect to {newurl}; redirects are not followed, so an "
            "API key never leaves the configured host: set endpoint.base_url to the final address"
        )


class _DeadlineHTTP(urllib.request.HTTPHandler):
    """urllib's HTTP with every read of the answer, headers included, ended at one total deadline."""

    def __init__(self, total_s: float) -> None:
        super().__init__()
        self.total_s = total_s

    def _connection(self, host: str, **kwargs: Any) -> DeadlineHTTPConnection:
        conn = DeadlineHTTPConnection(host, **kwargs)
        conn.expect_by(self.total_s)
        return conn

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)


class _DeadlineHTTPS(urllib.request.HTTPSHandler):
    def __init__(self, total_s: float) -> None:
        super().__init__()
        self.total_s = total_s

    def _connection(self, host: str, **kwargs: Any) -> DeadlineHTTPSConnection:
        conn = DeadlineHTTPSConnection(host, **kwargs)
        conn.expect_by(self.total_s)
        return conn

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req, context=self._context)  # type: ignore[attr-defined]


def _opener(total_s: float) -> urllib.request.OpenerDirector:
    """No redirect followed, and no proxies either: the load path (geventhttpclient) connects directly, so the
    probe must see the same server and a proxy must never see the key. The answer is whole within ``total_s``."""
    return urllib.request.build_opener(
        _NoRedirect, urllib.request.ProxyHandler({}), _DeadlineHTTP(total_s), _DeadlineHTTPS(total_s)
    )


def _request(
    url: str,
    *,
    api_key: str | None,
    timeout_s: float,
    body: dict[str, Any] | None = None,
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> tuple[int, bytes]:
    """One request: its status and body. ``timeout_s`` bounds each wait; the answer, status line and headers
    included, must be whole within twice that, and its body at most ``max_bytes`` long (a server trickling
    bytes, or sending without end)."""
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, headers=headers, method="POST" if body is not None else "GET")
    total_s = 2 * timeout_s
    try:
        try:
            resp = _opener(total_s).open(req, timeout=timeout_s)
        except urllib.error.HTTPError as exc:
            resp = exc  # an error status: its body is read under the same rules (and errors)
        with resp:
            return int(resp.status), _read_body(resp, url, max_bytes)
    except DeadlineExceeded:
        raise EndpointError(
            f"{url}: the answer was still arriving after {total_s:g} s in all (each byte within {timeout_s:g} s); "
            "the server trickles it"
        ) from None
    except urllib.error.URLError as exc:
        raise EndpointError(f"{url}: cannot connect ({exc.reason})") from None
    except http.client.HTTPException as exc:
        raise EndpointError(
            f"{url}: answered, but not in HTTP ({type(exc).__name__}: {exc}); expected an OpenAI-compatible server"
        ) from None
    except TimeoutError:
        raise EndpointError(f"{url}: no answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise EndpointError(f"{url}: connection failed ({type(exc).__name__}: {exc})") from None


def _read_body(resp: Any, url: str, max_bytes: int) -> bytes:
    """The body, piece by piece as it arrives: a server may send without end (a trickle ends at the
    connection's deadline: ``DeadlineExceeded``)."""
    chunks: list[bytes] = []
    size = 0
    while chunk := resp.read1(65536):
        size += len(chunk)
        if size > max_bytes:
            raise EndpointError(f"{url}: answered with more than {max_bytes} bytes (endpoint.max_response_bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


def _refused_key(url: str, status: int, api_key: str | None) -> EndpointError:
    if api_key:
        return EndpointError(
            f"{url}: HTTP {status}: the endpoint refused the API key read from the variable "
            "named by endpoint.api_key_env"
        )
    return EndpointError(
        f"{url}: HTTP {status}: the endpoint wants an API key; put it in an environment "
        "variable and name that variable in endpoint.api_key_env"
    )


def _decoded(raw: bytes, url: str, notes: list[str] | None) -> Any:
    """``raw`` as JSON, normalised to be kept (``loadgen.core.jsonsafe``); what was changed is said in ``notes``.
    ValueError for what is not JSON, or nests too deep for Python's parser."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise ValueError("nested too deep to read") from None
    changes: Counter[str] = Counter()
    body = normalised(body, changes)
    note = f"{url}: {describe(changes)}, kept as normalised (loadgen.core.jsonsafe)"
    if changes and notes is not None and note not in notes:  # a route asked twice (the version, the settings)
        notes.append(note)
    return body


def read_models(
    url: str,
    *,
    api_key: str | None,
    timeout_s: float,
    max_bytes: int = MAX_RESPONSE_BYTES,
    notes: list[str] | None = None,
) -> tuple[list[str], Any]:
    """The model ids as the server spells them (a lone surrogate kept: ``_probe`` refuses to send one) and the
    body, normalised to be kept; ``url``: the endpoint's ``/v1/models``."""
    status, raw = _request(url, api_key=api_key, timeout_s=timeout_s, max_bytes=max_bytes)
    if status in (401, 403):
        raise _refused_key(url, status, api_key)
    if status != 200:
        raise EndpointError(
            f"{url}: HTTP {status} ({_error_text(raw)}); expected an OpenAI-compatible server with GET /v1/models"
        )
    try:
        ids = [str(m["id"]) for m in json.loads(raw)["data"]]
    except RecursionError:
        raise EndpointError(f"{url}: answered JSON nested too deep to read; expected an OpenAI model list") from None
    except (ValueError, KeyError, TypeError):
        raise EndpointError(
            f"{url}: answered, but not with an OpenAI model list ({{'data': [{{'id': ...}}]}})"
        ) from None
    return ids, _decoded(raw, url, notes)


def read_version(
    root: str,
    *,
    api_key: str | None,
    timeout_s: float,
    max_bytes: int = MAX_RESPONSE_BYTES,
    notes: list[str] | None = None,
) -> str | None:
    """The server's version: vLLM's and llama.cpp's ``/version``; SGLang has none and says it in ``/server_info``
    (``/get_server_info`` before 0.5); ``root``: where the server's own routes live (``Routes.root``)."""
    for route in ("/version", "/server_info", "/get_server_info"):
        body = _json_or_none(root + route, api_key=api_key, timeout_s=timeout_s, max_bytes=max_bytes, notes=notes)
        if isinstance(body, dict) and isinstance(body.get("version"), (str, int, float)):
            return str(body["version"])
    return None


def _json_or_none(
    url: str, *, api_key: str | None, timeout_s: float, max_bytes: int, notes: list[str] | None = None
) -> Any:
    """A GET answered 200 with JSON, decoded and normalised (``_decoded``); None for anything else (a route
    the server lacks is no error)."""
    try:
        status, raw = _request(url, api_key=api_key, timeout_s=timeout_s, max_bytes=max_bytes)
        return _decoded(raw, url, notes) if status == 200 else None
    except (EndpointError, ValueError):
        return None


def read_config(
    root: str,
    *,
    api_key: str | None,
    timeout_s: float,
    cached_tokens_reported: bool | None,
    max_bytes: int = MAX_RESPONSE_BYTES,
    notes: list[str] | None = None,
) -> dict[str, Any]:
    """What the server says of its own settings (``loadgen.core.wire.server_config``): ``settings``, the raw
    ``*_info`` series of ``/metrics``, and which routes answered. Best effort: every route may be absent.
    ``root``: where the server's own routes live (``Routes.root``)."""
    info: dict[str, dict[str, str]] = {}
    try:
        status, raw = _request(root + "/metrics", api_key=api_key, timeout_s=timeout_s, max_bytes=max_bytes)
        if status == 200:
            info = info_series(raw.decode("utf-8", "replace"))
    except EndpointError:
        pass
    vllm = _json_or_none(
        root + "/server_info?config_format=json", api_key=api_key, timeout_s=timeout_s, max_bytes=max_bytes, notes=notes
    )
    sglang = _json_or_none(
        root + "/get_server_info", api_key=api_key, timeout_s=timeout_s, max_bytes=max_bytes, notes=notes
    )
    return {
        "settings": server_settings(info, vllm, sglang, cached_tokens_reported=cached_tokens_reported),
        "info_series": info,
        "answered": [
            route
            for route, answer in (("/metrics", info), ("/server_info", vllm), ("/get_server_info", sglang))
            if answer
        ],
    }


BUSY = frozenset({429, 500, 502, 503, 504})
BUSY_RETRY_S = (0.5, 1.0, 2.0)  # the probe only: load requests are never retried


def _error_text(raw: bytes) -> str:
    return raw[:300].decode("utf-8", "replace").strip() or "(empty body)"


def probe_kind(
    url: str,
    kind: Kind,
    model: str,
    wanted: Features,
    *,
    api_key: str | None,
    timeout_s: float,
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> KindProbe:
    """Send the probe with the richest dialect first; drop what the server rejects, one field at a time.
    ``url``: the endpoint's route for ``kind`` (``Routes.kinds``)."""
    base = replace(wanted, batch_sizes=False)  # an extension few servers know: the first field to drop
    candidates = [wanted, base] if wanted.batch_sizes else [wanted]
    if wanted.return_token_ids:
        candidates.append(replace(base, return_token_ids=False))
    if wanted.top_logprobs:
        candidates.append(replace(base, return_token_ids=False, top_logprobs=0))
    if wanted.logprobs:
        candidates.append(replace(base, return_token_ids=False, top_logprobs=0, logprobs=False))
    attempts: list[str] = []
    for features in candidates:
        messages = [{"role": "user", "content": PROBE_PROMPT}] if kind == "chat" else None
        body = build_body(
            kind,
            model=model,
            prompt=None if messages else PROBE_PROMPT,
            messages=messages,
            max_tokens=4,
            seed=0,
            stream=False,
            features=features,
        )
        status, raw = _request(url, api_key=api_key, timeout_s=timeout_s, body=body, max_bytes=max_bytes)
        for wait_s in BUSY_RETRY_S:
            if status not in BUSY:
                break
            # overloaded or failing now says nothing about the dialect: ask again, never drop a field for it
            attempts.append(f"{asdict(features)} -> HTTP {status}, asked again after {wait_s:g} s")
            time.sleep(wait_s)
            status, raw = _request(url, api_key=api_key, timeout_s=timeout_s, body=body, max_bytes=max_bytes)
        if status in BUSY:
            raise EndpointError(
                f"{url}: HTTP {status} to every probe request ({len(BUSY_RETRY_S) + 1} tries); "
                f"the endpoint is overloaded or failing: {_error_text(raw)}"
            )
        if status == 404:
            raise EndpointError(
                f"{url}: HTTP 404; the server has no {kind} endpoint, which the scenario asks for "
                f"(endpoint.kind, background.kind, or a canary's kind or messages)"
            )
        if status in (401, 403):
            raise _refused_key(url, status, api_key)
        if status != 200:
            attempts.append(f"{asdict(features)} -> HTTP {status}")
            continue
        try:
            completion = parse_body(kind, raw, tokens_as_ids=features.tokens_as_ids)
            honoured = features_from_probe(kind, raw, features)  # a 200 proves nothing: servers ignore fields
        except MalformedResponse as exc:
            raise EndpointError(
                f"{url}: answered 200 with a body that is not an OpenAI {kind} response ({exc})"
            ) from None
        attempts.append(f"{asdict(features)} -> HTTP 200")
        identity = "token_ids" if completion.token_ids else ("tokens" if completion.tokens else "text")
        details = (completion.usage or {}).get("prompt_tokens_details")
        cached = completion.usage is not None and isinstance(details, dict) and details.get("cached_tokens") is not None
        return KindProbe(honoured, identity, attempts, cached_tokens_reported=cached)
    raise EndpointError(f"{url}: every probe request was refused: {'; '.join(attempts)}")


def probe(
    base_url: str,
    *,
    model: str | None,
    kinds: set[Kind],
    wanted: Features,
    api_key: str | None,
    timeout_s: float = 10.0,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
) -> ServerInfo:
    """Who the server is and what it accepts. Every error and everything kept has the key redacted: the
    caller prints the one and writes the other into the manifest (and from there into the reports)."""
    try:
        info = _probe(base_url, model, kinds, wanted, api_key, timeout_s, max_response_bytes)
    except EndpointError as exc:
        raise EndpointError(redact(str(exc), api_key)) from None
    version = None if info.version is None else redact(info.version, api_key)
    return replace(
        info,
        models=redact_json(info.models, api_key),
        version=version,
        config=redact_json(info.config, api_key),
        notices=[redact(n, api_key) for n in info.notices],
    )


def _probe(
    base_url: str,
    model: str | None,
    kinds: set[Kind],
    wanted: Features,
    api_key: str | None,
    timeout_s: float,
    max_bytes: int,
) -> ServerInfo:
    notes: list[str] = []
    routes = Routes.of(base_url)
    ids, models = read_models(routes.models, api_key=api_key, timeout_s=timeout_s, max_bytes=max_bytes, notes=notes)
    if model is None:
        if not ids:
            raise EndpointError(f"{base_url}: /v1/models lists no model; set endpoint.model")
        model = ids[0]
        if api_key and api_key in model:  # it would travel in every request body, recorded in every record
            raise EndpointError(f"{base_url}: the first model /v1/models lists holds the API key; set endpoint.model")
        if lone_surrogate(model):  # sent in every request, written in every record: it has no UTF-8 form
            raise EndpointError(
                f"{routes.models}: the first model /v1/models lists is not valid Unicode (a lone surrogate); "
                "set endpoint.model"
            )
    elif ids and model not in ids:
        shown = [normalised(i, Counter()) for i in ids]
        raise EndpointError(f"{base_url}: model {model!r} is not served; the server has {shown}")
    version = read_version(routes.root, api_key=api_key, timeout_s=timeout_s, max_bytes=max_bytes, notes=notes)
    slow_s = max(timeout_s, 60.0)
    probes = {
        k: probe_kind(routes.kinds[k], k, model, wanted, api_key=api_key, timeout_s=slow_s, max_bytes=max_bytes)
        for k in sorted(kinds)
    }
    reported = [p.cached_tokens_reported for p in probes.values() if p.cached_tokens_reported is not None]
    config = read_config(
        routes.root,
        api_key=api_key,
        timeout_s=timeout_s,
        cached_tokens_reported=all(reported) if reported else None,
        max_bytes=max_bytes,
        notes=notes,
    )
    return ServerInfo(base_url, model, models, version, probes, config, notes)
